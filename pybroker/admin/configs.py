"""`pybroker configs`: describe and alter topic and broker configs, as kafka-configs.sh does.

Users (`--entity-type users`) carry SCRAM credentials, handled in user_configs.py.
`--describe` prints, per entity, `Dynamic configs for topic T are:` (or `All configs ...` with
`--all`) then `  name=value sensitive=false synonyms={SOURCE:name=value, ...}` lines sorted by
name. `--alter` applies `--add-config k1=v1,k2=[a,b]` and `--delete-config k1,k2` with
IncrementalAlterConfigs and prints `Completed updating config for topic T.`
"""

from __future__ import annotations

import argparse
import re
from typing import Sequence

from pybroker.admin.retry import call_with_retries
from pybroker.admin.tool import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_admin,
    run_client,
    run_tool,
)
from pybroker.admin import user_configs
from pybroker.client import BROKER_RESOURCE, TOPIC_RESOURCE, AdminClient, ConfigEntry
from pybroker.common.config import parse_properties

ERROR_PREFIX = "Error while executing config command : "
USER_ENTITY = -1  # not a DescribeConfigs resource: SCRAM credentials (user_configs.py)
ENTITY_TYPES = {"topics": TOPIC_RESOURCE, "brokers": BROKER_RESOURCE, "users": USER_ENTITY}
#: Kafka's ConfigEntry.ConfigSource names by DescribeConfigs source id
SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
#: which sources count as "dynamic" (shown without --all) per entity type
DYNAMIC_SOURCES = {TOPIC_RESOURCE: {1}, BROKER_RESOURCE: {2, 3}}
ASSIGNMENT = re.compile(r"([^=,]+)=(\[[^\]]*\]|[^,]*)")


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker configs", description="Describe or alter topic and broker configs.")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--describe", action="store_true", help="list the configs of the given entity")
    actions.add_argument("--alter", action="store_true", help="add or delete configs of the given entity")
    add_connection_arguments(parser)
    parser.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), help="topics, brokers or users")
    parser.add_argument("--entity-name", metavar="NAME", help="topic name or broker id; all of them if omitted "
                                                              "with --describe")
    parser.add_argument("--topic", metavar="TOPIC", help="same as --entity-type topics --entity-name TOPIC")
    parser.add_argument("--broker", metavar="ID", help="same as --entity-type brokers --entity-name ID")
    parser.add_argument("--all", action="store_true", help="with --describe: every config, not just overrides")
    parser.add_argument("--add-config", metavar="K1=V1,K2=[V1,V2]",
                        help="configs to set; a list value goes in square brackets")
    parser.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    parser.add_argument("--delete-config", metavar="K1,K2", help="configs to remove")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-configs", ERROR_PREFIX, command)


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    resource_type, name = entity(args)
    if resource_type == USER_ENTITY:
        if args.describe:
            run_client(settings, lambda client: user_configs.describe(client, name))
        else:
            updates, deletions = alterations(args)
            run_client(settings, lambda client: user_configs.alter(client, str(name), updates, deletions))
        return
    if args.describe:
        run_admin(settings, lambda admin: describe(admin, resource_type, name, args.all))
    else:
        updates, deletions = alterations(args)
        run_admin(settings, lambda admin: alter(admin, resource_type, name, updates, deletions))


def entity(args: argparse.Namespace) -> tuple[int, str | None]:
    """(resource type, name or None for all) from --entity-type/--entity-name or --topic/--broker."""
    if args.describe == args.alter:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    shorthand = [(t, n) for t, n in (("topics", args.topic), ("brokers", args.broker)) if n is not None]
    if shorthand and (args.entity_type or args.entity_name or len(shorthand) > 1):
        raise UsageError("--topic and --broker can't be combined with each other or with --entity-type/--entity-name")
    entity_type, name = shorthand[0] if shorthand else (args.entity_type, args.entity_name)
    if entity_type is None:
        raise UsageError("--entity-type must be specified")
    if args.alter and name is None:
        raise UsageError("--entity-name must be specified with --alter of " + entity_type)
    if entity_type == "brokers" and name is not None and not name.isdigit():
        raise UsageError(f"The entity name for brokers must be a valid integer broker id, but it is: {name}")
    if args.all and not args.describe:
        raise UsageError("--all can only be used with --describe")
    return ENTITY_TYPES[entity_type], name


def alterations(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    updates = parse_add_config(args.add_config or "")
    if args.add_config_file:
        try:
            with open(args.add_config_file, encoding="utf-8") as handle:
                updates.update(parse_properties(handle.read()))
        except OSError as exc:
            raise UsageError(f"Cannot read {args.add_config_file}: {exc.strerror}") from None
    deletions = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not updates and not deletions:
        raise UsageError("At least one of --add-config, --add-config-file or --delete-config must be specified "
                         "with --alter")
    both = sorted(set(updates) & set(deletions))
    if both:
        raise UsageError(f"Config(s) {','.join(both)} can't be both added and deleted")
    return updates, deletions


def parse_add_config(text: str) -> dict[str, str]:
    """`k1=v1,k2=[a,b]` -> {k1: v1, k2: "a,b"}; UsageError for anything else."""
    configs: dict[str, str] = {}
    position = 0
    text = text.strip()
    while position < len(text):
        match = ASSIGNMENT.match(text, position)
        if match is None:
            raise UsageError(f"Invalid --add-config {text!r}: use k1=v1,k2=[v1,v2,v2],k3=v3")
        value = match.group(2)
        configs[match.group(1).strip()] = value[1:-1] if value.startswith("[") else value
        position = match.end()
        if position < len(text):
            if text[position] != ",":
                raise UsageError(f"Invalid --add-config {text!r}: use k1=v1,k2=[v1,v2,v2],k3=v3")
            position += 1
    return configs


async def describe(admin: AdminClient, resource_type: int, name: str | None, describe_all: bool) -> None:
    if name is not None:
        names = [name]
    elif resource_type == TOPIC_RESOURCE:
        names = await admin.list_topics(include_internal=True)
    else:
        names = [str(b.node_id) for b in await admin.describe_cluster()]
    described = await admin.describe_configs(resource_type, names, include_synonyms=True)
    kind = "topic" if resource_type == TOPIC_RESOURCE else "broker"
    for entity_name in names:
        print(f"{'All' if describe_all else 'Dynamic'} configs for {kind} {entity_name} are:")
        entries = sorted(described.get(entity_name, []), key=lambda e: e.name)
        for entry in entries:
            if describe_all or entry.source in DYNAMIC_SOURCES[resource_type]:
                print(config_line(entry))


def config_line(entry: ConfigEntry) -> str:
    synonyms = ", ".join(f"{SOURCE_NAMES.get(s.source, 'UNKNOWN')}:{s.name}={_text(s.value)}" for s in entry.synonyms)
    return f"  {entry.name}={_text(entry.value)} sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}"


def _text(value: str | None) -> str:
    return "null" if value is None else value


async def alter(admin: AdminClient, resource_type: int, name: str | None, updates: dict[str, str],
                deletions: list[str]) -> None:
    assert name is not None
    if deletions:
        known = {e.name for e in (await admin.describe_configs(resource_type, [name]))[name]}
        unknown = [k for k in deletions if k not in known]
        if unknown:
            raise CommandError(f"Invalid config(s): {','.join(unknown)}")
    await call_with_retries(admin.client, "incrementalAlterConfigs", lambda: admin.incremental_alter_configs(
        resource_type, name, set_configs=updates, delete_configs=deletions))
    print(f"Completed updating config for {'topic' if resource_type == TOPIC_RESOURCE else 'broker'} {name}.")
