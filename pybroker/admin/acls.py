"""`pybroker acls`: kafka-acls.sh's flags, checks and output (AclCommand), through the Admin ACL calls.

``--add`` creates, for each resource given (``--topic``, ``--group``, ``--cluster``,
``--transactional-id``, ``--delegation-token``, with ``--resource-pattern-type literal|prefixed``),
one ACL per principal, operation and host (``--allow-principal``/``--allow-host``,
``--deny-principal``/``--deny-host``; hosts default to ``*``, ``--operation`` to All), then lists the
resources' ACLs. ``--producer`` stands for Write, Describe and Create on the topics (and Write,
Describe on ``--transactional-id``, IdempotentWrite on the cluster with ``--idempotent``);
``--consumer`` for Read and Describe on the topics and Read on the groups. ``--remove`` deletes those
ACLs (every ACL of the resource when no principal is given) after a y/n question unless ``--force``;
``--list`` prints the ACLs of the resources (``any``/``match`` pattern types allowed), or all.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_client,
    run_tool,
)
from pybroker.client import KafkaClient
from pybroker.client.acl_admin import create_acls, delete_acls, describe_acls
from pybroker.security.acl import (
    ANY_BINDING,
    CLUSTER_NAME,
    RESOURCE_OPERATIONS,
    WILDCARD,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    parse_principal,
)

ERROR_PREFIX = "Error while executing ACL command: "
NEWLINE = "\n"

Op = AclOperation
AclMap = dict[ResourcePatternFilter, list[AccessControlEntry]]


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker acls", description="Add, remove and list ACLs (kafka-acls.sh).")
    add_connection_arguments(parser)
    for flag, text in (("--add", "add ACLs"), ("--remove", "remove ACLs"), ("--list", "list ACLs"),
                       ("--cluster", "the cluster resource"), ("--producer", "ACLs of the producer role"),
                       ("--consumer", "ACLs of the consumer role"),
                       ("--idempotent", "with --producer: IdempotentWrite on the cluster"),
                       ("--force", "assume yes to every question")):
        parser.add_argument(flag, action="store_true", help=text)
    for flag in ("--topic", "--group", "--transactional-id", "--delegation-token", "--allow-principal",
                 "--deny-principal", "--allow-host", "--deny-host", "--operation"):
        parser.add_argument(flag, action="append", default=[], metavar=flag[2:].upper().replace("-", "_"))
    parser.add_argument("--resource-pattern-type", default="literal", metavar="literal|prefixed|match|any",
                        help="pattern type of the resources (default literal; match and any only to list or remove)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "adminclient-acls", ERROR_PREFIX, _run)


def _run(args: argparse.Namespace, settings: ClientSettings) -> int:
    _check(args)
    if args.add:
        run_client(settings, lambda client: _add(client, args))
    elif args.remove:
        run_client(settings, lambda client: _remove(client, args))
    else:
        run_client(settings, lambda client: _list(client, _filters(args, required=False)))
    return 0


def _check(args: argparse.Namespace) -> None:
    if sum((args.add, args.remove, args.list)) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove. ")
    if args.list:
        for name in ("producer", "consumer", "allow_host", "allow_principal", "deny_host", "deny_principal"):
            if getattr(args, name):
                raise UsageError(f'Option "[list]" can\'t be used with option "[{name.replace("_", "-")}]"')
    for role in ("producer", "consumer"):
        for name in ("operation", "deny_principal", "deny_host"):
            if getattr(args, role) and getattr(args, name):
                raise UsageError(f'Option "[{role}]" can\'t be used with option "[{name.replace("_", "-")}]"')
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or
                          (not args.producer and (args.cluster or args.transactional_id))):
        raise UsageError("With --consumer you must specify a --topic and a --group and no --cluster or "
                         "--transactional-id option should be specified.")
    pattern_type = PatternType.parse(args.resource_pattern_type)
    if pattern_type is PatternType.UNKNOWN:
        raise UsageError(f"Invalid --resource-pattern-type {args.resource_pattern_type}: "
                         "use literal, prefixed, match or any")
    if args.add and pattern_type in (PatternType.ANY, PatternType.MATCH):
        raise UsageError("A '--resource-pattern-type' value of 'any' or 'match' is not valid when adding acls.")


def _filters(args: argparse.Namespace, required: bool = True) -> list[ResourcePatternFilter]:
    pattern_type = PatternType.parse(args.resource_pattern_type)
    filters = [ResourcePatternFilter(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic]
    if args.cluster:
        filters.append(ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, pattern_type))
    filters += [ResourcePatternFilter(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group]
    filters += [ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t.strip(), pattern_type)
                for t in args.transactional_id]
    filters += [ResourcePatternFilter(ResourceType.DELEGATION_TOKEN, t.strip(), pattern_type)
                for t in args.delegation_token]
    if not filters and required:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                         "or --delegation-token <Delegation Token ID>")
    return filters


def _entries(args: argparse.Namespace, operations: Sequence[AclOperation]) -> list[AccessControlEntry]:
    entries = []
    for permission, principals, hosts in ((AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
                                          (AclPermissionType.DENY, args.deny_principal, args.deny_host)):
        for principal in principals:
            try:
                name = str(parse_principal(principal.strip()))
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            for operation in operations:
                for host in [h.strip() for h in hosts] or [WILDCARD]:
                    entry = AccessControlEntry(name, host, operation, permission)
                    if entry not in entries:
                        entries.append(entry)
    return entries


def _acl_map(args: argparse.Namespace) -> AclMap:
    """Resource filter -> ACLs, as AclCommand's getResourceToAcls builds it."""
    filters = _filters(args)
    acls: AclMap = {}
    if not args.producer and not args.consumer:
        operations = []
        for text in args.operation or ["All"]:
            operation = AclOperation.parse(text)
            if operation in (Op.UNKNOWN, Op.ANY):
                raise CommandError(f"Invalid operation {text}")
            operations.append(operation)
        acls = {f: _entries(args, operations) for f in filters}
    if args.producer:
        for f in filters:
            if f.resource_type is ResourceType.TOPIC:
                acls[f] = _entries(args, (Op.WRITE, Op.DESCRIBE, Op.CREATE))
            elif f.resource_type is ResourceType.TRANSACTIONAL_ID:
                acls[f] = _entries(args, (Op.WRITE, Op.DESCRIBE))
        if args.idempotent:
            cluster = ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            acls[cluster] = _entries(args, (Op.IDEMPOTENT_WRITE,))
    if args.consumer:
        for f in filters:
            if f.resource_type is ResourceType.TOPIC:
                acls[f] = acls.get(f, []) + [e for e in _entries(args, (Op.READ, Op.DESCRIBE))
                                             if e not in acls.get(f, [])]
            elif f.resource_type is ResourceType.GROUP:
                acls[f] = _entries(args, (Op.READ,))
    for f, entries in acls.items():
        valid = RESOURCE_OPERATIONS[f.resource_type] + (Op.ALL,)
        if any(e.operation not in valid for e in entries):
            raise UsageError(f"ResourceType {f.resource_type.name} only supports operations "
                             f"{', '.join(o.camel for o in valid)}")
    return acls


def _lines(entries: Sequence[AccessControlEntry]) -> str:
    return NEWLINE.join(f"\t{e}" for e in entries)


async def _add(client: KafkaClient, args: argparse.Namespace) -> None:
    acls = _acl_map(args)
    if any(not entries for entries in acls.values()):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    for f, entries in acls.items():
        pattern = ResourcePattern(f.resource_type, f.name or "", f.pattern_type)
        print(f"Adding ACLs for resource `{pattern}`: {NEWLINE} {_lines(entries)} {NEWLINE}")
        errors = [e for e in await create_acls(client, [AclBinding(pattern, entry) for entry in entries]) if e]
        if errors:
            raise CommandError(str(errors[0]))
    await _list(client, list(acls))


async def _remove(client: KafkaClient, args: argparse.Namespace) -> None:
    acls = _acl_map(args)
    for f, entries in acls.items():
        if not entries:
            question = f"Are you sure you want to delete all ACLs for resource filter `{f}`? (y/n)"
            filters = [AclBindingFilter(f)]
        else:
            question = (f"Are you sure you want to remove ACLs: {NEWLINE} {_lines(entries)} {NEWLINE} "
                        f"from resource filter `{f}`? (y/n)")
            filters = [AclBindingFilter(f, AccessControlEntryFilter(e.principal, e.host, e.operation, e.permission))
                       for e in entries]
        if _confirm(args, question):
            await delete_acls(client, filters)
    await _list(client, list(acls))


def _confirm(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question)
    return sys.stdin.readline().strip().lower() == "y"


async def _list(client: KafkaClient, filters: Sequence[ResourcePatternFilter]) -> None:
    found: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for acl_filter in [AclBindingFilter(f) for f in filters] or [ANY_BINDING]:
        for binding in await describe_acls(client, acl_filter):
            entries = found.setdefault(binding.pattern, [])
            if binding.entry not in entries:
                entries.append(binding.entry)
    for pattern, entries in found.items():
        print(f"Current ACLs for resource `{pattern}`: {NEWLINE} {_lines(entries)} {NEWLINE}")
