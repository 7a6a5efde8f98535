"""`pybroker consumer-groups`: kafka-consumer-groups.sh's --list, --describe, --reset-offsets and --delete.

Tables use Kafka's column layout (left-aligned, each column at least 15 wide, `-` for a missing
value) so scripts written against ConsumerGroupCommand can read them. Offsets are reset only in an
inactive group (Empty, or Dead: one that does not exist yet), as Kafka requires.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from pybroker.client.offset_reset import (
    RESET_OPTIONS,
    ResetPlan,
    check_reset_arguments,
    parse_duration_ms,
    plan_reset,
)
from pybroker.common.progress import Progress
from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_client,
    run_tool,
)
from pybroker.admin.group_tool import (
    MISSING,
    assignment_text,
    check_groups_and_views,
    one_action,
    selected_groups,
    table,
    width,
)
from pybroker.client import AdminClient, KafkaClient, KafkaClientError
from pybroker.client.group_offsets import INACTIVE_STATES, OffsetRow, offset_rows
from pybroker.client.groups import GroupAdmin, GroupDescription, ListedGroup

ERROR_PREFIX = "Error: Executing consumer group command failed due to "
ACTIONS = ("list", "describe", "delete", "reset_offsets")
REBALANCING_STATES = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
GROUP_TYPES = ("classic", "consumer")
NO_ACTION_WARNING = ("WARN: No action will be performed as the --execute option is missing. In a future major "
                     "release, the default behavior of this command will be to prompt the user before executing "
                     "the reset rather than doing a dry run. You should add the --dry-run option explicitly if you "
                     "are scripting this command and want to keep the current default behavior without prompting.")


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker consumer-groups",
                        description="List, describe, reset the offsets of, or delete consumer groups.")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="list all consumer groups")
    parser.add_argument("--type", nargs="?", const="", metavar="TYPES",
                        help="with --list: show each group's type (classic, consumer), only the comma-separated "
                             "TYPES if given")
    actions.add_argument("--describe", action="store_true",
                         help="describe groups: offsets and lag (default), --members or --state")
    actions.add_argument("--delete", action="store_true", help="delete empty groups and their offsets")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset the group's offsets (one --to-*/--shift-by/--by-duration option, "
                              "with --dry-run or --execute)")
    add_connection_arguments(parser)
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="a group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every group")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P0,P1]",
                        help="with --reset-offsets: a topic, optionally limited to some partitions (repeatable)")
    parser.add_argument("--all-topics", action="store_true",
                        help="with --reset-offsets: every topic the group has offsets for")
    parser.add_argument("--members", action="store_true", help="with --describe: the group's members")
    parser.add_argument("--state", action="store_true", help="with --describe: the group's state")
    parser.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag (the default)")
    parser.add_argument("--verbose", action="store_true",
                        help="with --describe --members: also each member's instance id and assignment (and, in "
                             "a consumer-protocol group, its epoch and target); with --state: the group's epochs")
    for flag, metavar, help_text in RESET_OPTIONS:
        if metavar is None:
            parser.add_argument(flag, action="store_true", help=help_text)
        else:
            parser.add_argument(flag, metavar=metavar, help=help_text)
    parser.add_argument("--dry-run", action="store_true", help="with --reset-offsets: only show the new offsets")
    parser.add_argument("--execute", action="store_true", help="with --reset-offsets: commit the new offsets")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-consumer-groups", ERROR_PREFIX, command,
                    command_error_prefix="Error: ")


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    action = check_arguments(args)
    run_client(settings, lambda client: COMMANDS[action](client, args))


def check_arguments(args: argparse.Namespace) -> str:
    action = one_action(args, ACTIONS)
    check_groups_and_views(args, action)
    if args.type is not None:
        if action != "list":
            raise UsageError("--type can only be used with --list")
        unknown = [t for t in _types(args.type) if t not in GROUP_TYPES]
        if unknown:
            raise UsageError(f"Invalid types list '{args.type}'. Valid types are: {', '.join(GROUP_TYPES)}")
    if action == "reset_offsets":
        option = check_reset_arguments(args)
        if option == "by_duration":
            parse_duration_ms(args.by_duration)
    elif args.topic or args.all_topics or args.dry_run or args.execute:
        raise UsageError("--topic, --all-topics, --dry-run and --execute can only be used with --reset-offsets")
    return action


async def group_ids(client: KafkaClient, args: argparse.Namespace) -> list[str]:
    return await selected_groups(args, lambda: consumer_groups(client))


async def consumer_groups(client: KafkaClient) -> list[ListedGroup]:
    """Every group but share groups (`pybroker share-groups` lists those), as Kafka's tool lists them."""
    return [g for g in await GroupAdmin(client).list_groups() if g.group_type != "share"]


def _types(option: str) -> list[str]:
    return [t.strip().lower() for t in option.split(",") if t.strip()]


async def list_groups(client: KafkaClient, args: argparse.Namespace) -> None:
    listed = await consumer_groups(client)
    if args.type is None:
        for group in listed:
            print(group.group_id)
        return
    wanted = set(_types(args.type))
    rows = [[g.group_id, g.group_type.capitalize()] for g in listed if not wanted or g.group_type in wanted]
    print("\n".join(table(("GROUP", "TYPE"), rows, [width([r[0] for r in rows]), None])))


async def delete(client: KafkaClient, args: argparse.Namespace) -> None:
    groups = await group_ids(client, args)
    admin = GroupAdmin(client)
    failures = []
    with Progress("Deleting consumer groups", len(groups), "groups") as progress:
        for group in groups:
            try:
                await admin.delete_group(group)
            except KafkaClientError as exc:
                failures.append(f"Group '{group}' could not be deleted due to: {exc}")
            progress.advance()
    if failures:
        raise CommandError("Deletion of some consumer groups failed: " + " ".join(failures))
    print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in groups)}) was successful.")


async def describe(client: KafkaClient, args: argparse.Namespace) -> None:
    admin = GroupAdmin(client)
    missing = []
    for group_id in await group_ids(client, args):
        group = await admin.describe_group(group_id)
        if group.state == "Dead":
            missing.append(group_id)
            continue
        if args.state:
            print_state(group, args.verbose)
            continue
        if group.state == "Empty":
            print(f"\nConsumer group '{group_id}' has no active members.", file=sys.stderr)
        elif group.state in REBALANCING_STATES:
            print(f"\nWarning: Consumer group '{group_id}' is rebalancing.", file=sys.stderr)
        if args.members:
            print_members(group, args.verbose)
        else:
            rows = await offset_rows(client, admin, group)
            if rows:
                print_offsets(rows)
    if missing:
        raise CommandError(f"Consumer group '{missing[0]}' does not exist.")


def text(value: object | None) -> str:
    return MISSING if value is None else str(value)


def print_offsets(rows: Sequence[OffsetRow]) -> None:
    cells = [[r.group, r.topic, str(r.partition), text(r.current), text(r.log_end), text(r.lag), text(r.consumer_id),
              text(r.host), text(r.client_id)] for r in rows]
    widths = [width([c[0] for c in cells]), width([c[1] for c in cells]), 10, 15, 15, 15,
              width([c[6] for c in cells]), width([c[7] for c in cells]), None]
    lines = table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                   "CLIENT-ID"), cells, widths)
    print("\n" + "\n".join(lines))
    print()


def print_members(group: GroupDescription, verbose: bool) -> None:
    if not group.members:
        return
    members = sorted(group.members, key=lambda m: (-len(m.assignment), m.member_id))
    header: tuple[str, ...]
    if verbose and group.group_type == "consumer":
        header = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                  "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT")
        cells = [[group.group_id, m.member_id, text(m.group_instance_id), m.host, m.client_id, str(len(m.assignment)),
                  text(m.member_epoch), assignment_text(m.assignment), text(group.assignment_epoch),
                  assignment_text(m.target)] for m in members]
        widths: list[int | None] = [width([group.group_id]), *(width([c[i] for c in cells]) for i in (1, 2, 3, 4)),
                                    15, 15, width([c[7] for c in cells]), 15, None]
    elif verbose:
        header = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
        cells = [[group.group_id, m.member_id, text(m.group_instance_id), m.host, m.client_id, str(len(m.assignment)),
                  assignment_text(m.assignment)] for m in members]
        widths = [width([group.group_id]), *(width([c[i] for c in cells]) for i in (1, 2, 3, 4)), 15, None]
    else:
        header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
        cells = [[group.group_id, m.member_id, m.host, m.client_id, str(len(m.assignment))] for m in members]
        widths = [width([group.group_id]), *(width([c[i] for c in cells]) for i in (1, 2, 3)), 15]
    print("\n" + "\n".join(table(header, cells, widths)))
    print()


def print_state(group: GroupDescription, verbose: bool = False) -> None:
    coordinator = f"{group.coordinator.host}:{group.coordinator.port}  ({group.coordinator.node_id})"
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    row = [group.group_id, coordinator, group.protocol, group.state, str(len(group.members))]
    widths: list[int | None] = [max(25, len(group.group_id)), max(25, len(coordinator)), 20, 15, None]
    if verbose and group.group_type == "consumer":
        header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [text(group.group_epoch), text(group.assignment_epoch)]
        widths[-1:] = [15, 15, None]
    lines = table(header, [row], widths)
    print("\n" + "\n".join(lines))
    print()


async def reset_offsets(client: KafkaClient, args: argparse.Namespace) -> None:
    admin = GroupAdmin(client)
    if not (args.dry_run or args.execute):
        print(NO_ACTION_WARNING, file=sys.stderr)
    for group_id in await group_ids(client, args):
        group = await admin.describe_group(group_id)
        if group.state not in INACTIVE_STATES:
            raise CommandError(f"Assignments can only be reset if the group '{group_id}' is inactive, but the "
                               f"current state is {group.state}.")
        plan = await plan_reset(AdminClient(client), admin, group_id, args)
        print_reset(plan)
        if args.execute:
            await admin.commit_offsets(group_id, plan.offsets)


def print_reset(plan: ResetPlan) -> None:
    rows = [[plan.group_id, tp.topic, str(tp.partition), str(offset)]
            for tp, offset in sorted(plan.offsets.items(), key=lambda item: (item[0].topic, item[0].partition))]
    for warning in plan.warnings:
        print(warning, file=sys.stderr)
    if rows:
        print("\n" + "\n".join(table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows, [30, 30, 10, 15])))
    print()


COMMANDS = {"list": list_groups, "describe": describe, "delete": delete, "reset_offsets": reset_offsets}
