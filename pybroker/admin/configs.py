"""`pybroker configs`: describe and alter topic, broker, client-metrics and group configs, as kafka-configs.sh does.

Users and clients (`--entity-type users|clients`, together for a user's client) carry quotas and
SCRAM credentials, ips (`--entity-type ips`) KIP-612's connection_creation_rate quota; all handled in
quota_configs.py.
`--describe` prints, per entity, `Dynamic configs for topic T are:` (or `All configs ...` with
`--all`) then `  name=value sensitive=false synonyms={SOURCE:name=value, ...}` lines sorted by
name. `--alter` applies `--add-config k1=v1,k2=[a,b]` and `--delete-config k1,k2` with
IncrementalAlterConfigs and prints `Completed updating config for topic T.`
Groups (`--entity-type groups`, `--group G`) are GROUP config resources (KIP-848/KIP-932: `share.*` and
`consumer.*` keys); the broker decides which keys it accepts, and refuses the others with INVALID_CONFIG.
"""

from __future__ import annotations

import argparse
import re
from typing import Sequence

from pybroker.admin.retry import call_with_retries
from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_admin,
    run_client,
    run_tool,
)
from pybroker.admin import quota_configs
from pybroker.client import BROKER_RESOURCE, TOPIC_RESOURCE, AdminClient, ConfigEntry
from pybroker.client.client_metrics_admin import (
    CLIENT_METRICS_RESOURCE,
    GROUP_RESOURCE,
    list_client_metrics_resources,
    list_group_config_resources,
)
from pybroker.client.groups import GroupAdmin
from pybroker.common.config import parse_properties

ERROR_PREFIX = "Error while executing config command : "
# users and clients are not DescribeConfigs resources
ENTITY_TYPES = {"topics": TOPIC_RESOURCE, "brokers": BROKER_RESOURCE, "client-metrics": CLIENT_METRICS_RESOURCE,
                "groups": GROUP_RESOURCE,
                quota_configs.USERS: None, quota_configs.CLIENTS: None, quota_configs.IPS: None}
#: how ConfigCommand names one entity of a type in its output (the type without its last letter)
SINGULAR = {TOPIC_RESOURCE: "topic", BROKER_RESOURCE: "broker", CLIENT_METRICS_RESOURCE: "client-metric",
            GROUP_RESOURCE: "group"}
#: the shorthand flags: (option dest, entity type, name or "" for the default)
SHORTHANDS = (("topic", "topics"), ("broker", "brokers"), ("user", "users"), ("client", "clients"), ("ip", "ips"),
              ("group", "groups"))
DEFAULT_SHORTHANDS = (("user_defaults", "users"), ("client_defaults", "clients"), ("ip_defaults", "ips"))
#: Kafka's ConfigEntry.ConfigSource names by DescribeConfigs source id
SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
#: which sources count as "dynamic" (shown without --all) per entity type
DYNAMIC_SOURCES = {TOPIC_RESOURCE: {1}, BROKER_RESOURCE: {2, 3}, CLIENT_METRICS_RESOURCE: {7}, GROUP_RESOURCE: {8}}
ASSIGNMENT = re.compile(r"([^=,]+)=(\[[^\]]*\]|[^,]*)")


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker configs", description="Describe or alter topic, broker, client-metrics and "
                        "group configs, client quotas and SCRAM credentials.")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--describe", action="store_true", help="list the configs of the given entity")
    actions.add_argument("--alter", action="store_true", help="add or delete configs of the given entity")
    add_connection_arguments(parser)
    parser.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), action="append",
                        help="topics, brokers, client-metrics, groups, users, clients or ips; users and clients "
                             "together for a user's client")
    parser.add_argument("--entity-name", metavar="NAME", dest="entity_names", action="append",
                        help="topic name, broker id, subscription, group id, user principal, client id or IP "
                             "address, one per --entity-type; all of them if omitted with --describe")
    parser.add_argument("--entity-default", dest="entity_names", action="append_const", const="",
                        help="the default user, client or ip (in place of an --entity-name)")
    parser.add_argument("--topic", metavar="TOPIC", help="same as --entity-type topics --entity-name TOPIC")
    parser.add_argument("--broker", metavar="ID", help="same as --entity-type brokers --entity-name ID")
    parser.add_argument("--user", metavar="PRINCIPAL", help="same as --entity-type users --entity-name PRINCIPAL")
    parser.add_argument("--client", metavar="ID", help="same as --entity-type clients --entity-name ID")
    parser.add_argument("--user-defaults", action="store_true", help="same as --entity-type users --entity-default")
    parser.add_argument("--client-defaults", action="store_true",
                        help="same as --entity-type clients --entity-default")
    parser.add_argument("--ip", metavar="IP", help="same as --entity-type ips --entity-name IP")
    parser.add_argument("--ip-defaults", action="store_true", help="same as --entity-type ips --entity-default")
    parser.add_argument("--group", metavar="GROUP", help="same as --entity-type groups --entity-name GROUP")
    parser.add_argument("--all", action="store_true", help="with --describe: every config, not just overrides")
    parser.add_argument("--add-config", metavar="K1=V1,K2=[V1,V2]",
                        help="configs to set; a list value goes in square brackets")
    parser.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    parser.add_argument("--delete-config", metavar="K1,K2", help="configs to remove")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-configs", ERROR_PREFIX, command)


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    types, names = entities(args)
    if ENTITY_TYPES[types[0]] is None:
        if args.describe:
            run_client(settings, lambda client: quota_configs.describe(client, types, names))
        else:
            updates, deletions = alterations(args)
            run_client(settings, lambda client: quota_configs.alter(client, types, names, updates, deletions))
        return
    resource_type, name = ENTITY_TYPES[types[0]], (names[0] if names else None)
    assert resource_type is not None
    if args.describe:
        run_admin(settings, lambda admin: describe(admin, resource_type, name, args.all))
    else:
        updates, deletions = alterations(args)
        run_admin(settings, lambda admin: alter(admin, resource_type, name, updates, deletions))


def entities(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """ConfigCommandOptions' entity types and names ("" for a default) from --entity-* or the shorthands."""
    if args.describe == args.alter:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    types, names = list(args.entity_type or ()), list(args.entity_names or ())
    shorthands = [(t, getattr(args, dest)) for dest, t in SHORTHANDS if getattr(args, dest) is not None]
    shorthands += [(t, "") for dest, t in DEFAULT_SHORTHANDS if getattr(args, dest)]
    if shorthands and (types or names):
        raise UsageError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    types += [t for t, _ in shorthands]
    names += [n for _, n in shorthands]
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise UsageError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    if not types:
        raise UsageError("--entity-type must be specified")
    if len(types) > 1 and set(types) != {quota_configs.USERS, quota_configs.CLIENTS}:
        raise UsageError("Only 'users' and 'clients' entity types may be specified together")
    quota_entity = ENTITY_TYPES[types[0]] is None
    if "" in names and not quota_entity:
        raise UsageError(f"--entity-default is not supported with {types[0]}")
    if args.alter and not names:
        raise UsageError("An entity-name or default entity must be specified with --alter of users, clients, "
                         "brokers or ips" if quota_entity else f"An entity name must be specified with --alter of "
                                                               f"{types[0]}")
    if types[0] == quota_configs.IPS and names and names[0] and not quota_configs.resolvable(names[0]):
        raise UsageError(f"The entity name for ips must be a valid IP or resolvable host, but it is: {names[0]}")
    if types[0] == "brokers" and names and not names[0].isdigit():
        raise UsageError(f"The entity name for brokers must be a valid integer broker id, but it is: {names[0]}")
    if args.all and not args.describe:
        raise UsageError("--all can only be used with --describe")
    return types, names


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
    kind = SINGULAR[resource_type]
    if resource_type in (CLIENT_METRICS_RESOURCE, GROUP_RESOURCE):
        existing = await config_entities(admin, resource_type)
        if name is not None and name not in existing and not describe_all:
            print(f"The {kind} '{name}' doesn't exist and doesn't have dynamic config.")
            return
    if name is not None:
        names = [name]
    elif resource_type == TOPIC_RESOURCE:
        names = await admin.list_topics(include_internal=True)
    elif resource_type in (CLIENT_METRICS_RESOURCE, GROUP_RESOURCE):
        names = existing
    else:
        names = [str(b.node_id) for b in await admin.describe_cluster()]
    described = await admin.describe_configs(resource_type, names, include_synonyms=True) if names else {}
    for entity_name in names:
        print(f"{'All' if describe_all else 'Dynamic'} configs for {kind} {entity_name} are:")
        entries = sorted(described.get(entity_name, []), key=lambda e: e.name)
        for entry in entries:
            if describe_all or entry.source in DYNAMIC_SOURCES[resource_type]:
                print(config_line(entry))


async def config_entities(admin: AdminClient, resource_type: int) -> list[str]:
    """The client-metrics subscriptions, or the groups: those of every type the brokers list, then those that
    have only a config of their own, as ConfigCommand lists them."""
    if resource_type == CLIENT_METRICS_RESOURCE:
        return await list_client_metrics_resources(admin.client)
    groups = [g.group_id for g in await GroupAdmin(admin.client).list_groups()]
    return list(dict.fromkeys(groups + await list_group_config_resources(admin.client)))


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
    print(f"Completed updating config for {SINGULAR[resource_type]} {name}.")
