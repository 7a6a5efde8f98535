"""`pybroker features`: describe and change finalized feature levels, as kafka-features.sh (Kafka 3.9).

Subcommands `describe`, `upgrade --feature NAME=LEVEL`, `downgrade --feature NAME=LEVEL [--unsafe]` and
`disable --feature NAME`, each change with `--dry-run` (UpdateFeatures' validateOnly). One line per feature:
`Feature: f\tSupportedMinVersion: a\tSupportedMaxVersion: b\tFinalizedVersionLevel: c\tEpoch: e` for
describe (features the broker supports only; a line saying there are none on a ZooKeeper-mode broker); `f was upgraded to N.`
or `Could not upgrade f to N. <reason>` for changes, and then `K out of M operation(s) failed.` on stderr
with exit code 1 when any failed. `--metadata` (metadata.version by release name) is KRaft-only and not offered.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from pybroker.client.command_line import (
    EXIT_FAILURE,
    ClientSettings,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_client,
    run_tool,
)
from pybroker.client.feature_admin import FeatureChange, UpgradeType, describe_features, update_features

ERROR_PREFIX = ""


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker features", description="Manage the feature flags of a cluster.")
    add_connection_arguments(parser)
    commands = parser.add_subparsers(dest="action", required=True)
    commands.add_parser("describe", help="describe the supported and finalized features")
    for action, help_text in (("upgrade", "upgrade one or more feature flags"),
                              ("downgrade", "downgrade one or more feature flags"),
                              ("disable", "disable one or more feature flags (set their level to 0)")):
        sub = commands.add_parser(action, help=help_text)
        sub.add_argument("--feature", action="append", default=[],
                         help="a feature to disable" if action == "disable" else "a feature=level pair")
        sub.add_argument("--dry-run", action="store_true", help="validate without performing the operation")
        if action == "downgrade":
            sub.add_argument("--unsafe", action="store_true",
                             help="allow a downgrade that may lose metadata (UNSAFE_DOWNGRADE)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-features", ERROR_PREFIX, command)


def parse_name_and_level(item: str) -> tuple[str, int]:
    """Kafka's FeatureCommand.parseNameAndLevel, with its messages."""
    name, sep, level = item.partition("=")
    if not sep:
        raise UsageError(f"Can't parse feature=level string {item}: equals sign not found.")
    try:
        return name.strip(), int(level.strip())
    except ValueError:
        raise UsageError(f"Can't parse feature=level string {item}: unable to parse {level.strip()} as a short.") \
            from None


def command(args: argparse.Namespace, settings: ClientSettings) -> int:
    if args.action == "describe":
        metadata = run_client(settings, describe_features)
        if not metadata.supported:
            print("No supported features: this cluster's brokers support no feature flags "
                  "(a ZooKeeper-mode or single-node pybroker finalizes none; KRaft features are not served).")
            return 0
        epoch = "-" if metadata.epoch is None else str(metadata.epoch)
        for name, (low, high) in sorted(metadata.supported.items()):
            print(f"Feature: {name}\tSupportedMinVersion: {low}\tSupportedMaxVersion: {high}\t"
                  f"FinalizedVersionLevel: {metadata.finalized.get(name, 0)}\tEpoch: {epoch}")
        return 0
    if not args.feature:
        raise UsageError(f"You must specify at least one feature to {args.action}")
    if args.action == "disable":
        changes = {name: FeatureChange(0, UpgradeType.SAFE_DOWNGRADE) for name in args.feature}
    else:
        kind = UpgradeType.UPGRADE if args.action == "upgrade" else \
            UpgradeType.UNSAFE_DOWNGRADE if args.unsafe else UpgradeType.SAFE_DOWNGRADE
        changes = {name: FeatureChange(level, kind) for name, level in map(parse_name_and_level, args.feature)}
    results = run_client(settings, lambda client: update_features(client, changes, validate_only=args.dry_run))
    failures = 0
    for name, change in changes.items():
        error = results[name]
        failures += error is not None
        print(_outcome(args.action, name, change.level, args.dry_run, None if error is None else str(error)))
    if failures:
        print(f"{failures} out of {len(changes)} operation(s) failed.", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def _outcome(action: str, name: str, level: int, dry_run: bool, error: str | None) -> str:
    target = "" if action == "disable" else f" to {level}"
    if error is None:
        return f"{name} {'can be' if dry_run else 'was'} {action}d{target}."
    return f"{'Can not' if dry_run else 'Could not'} {action} {name}{target}. {error}"
