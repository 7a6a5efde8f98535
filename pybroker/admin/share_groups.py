"""`pybroker share-groups`: kafka-share-groups.sh's --list, --describe (--offsets, the default, --members, --state),
--reset-offsets, --delete-offsets and --delete.

Tables in Kafka's ShareGroupCommand column layout (``group_tool.table``). Offsets are the share-partitions'
start offsets (DescribeShareGroupOffsets: "-" where a share-partition has no state yet); --reset-offsets
(--to-earliest, --to-latest, --to-datetime, --to-offset; a dry run unless --execute) and --delete-offsets change
them only while the group has no members, as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from pybroker.admin.consumer_groups import NO_ACTION_WARNING, print_reset, text
from pybroker.admin.group_tool import (
    assignment_text,
    check_groups_and_views,
    flag,
    one_action,
    selected_groups,
    table,
    width,
)
from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_client,
    run_tool,
)
from pybroker.client import AdminClient, KafkaClient, KafkaClientError
from pybroker.client.errors import ResponseError
from pybroker.client.groups import GroupAdmin
from pybroker.client.offset_reset import RESET_OPTIONS, check_reset_arguments, chosen_reset, plan_reset_from
from pybroker.client.share_groups import ShareGroupAdmin, ShareGroupDescription, ShareOffset
from pybroker.protocol.error_codes import ErrorCode

ERROR_PREFIX = "Error: Executing share group command failed due to "
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SHARE_RESET_OPTIONS = tuple(o for o in RESET_OPTIONS
                            if o[0] in ("--to-earliest", "--to-latest", "--to-datetime", "--to-offset"))


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker share-groups", description="List, describe or delete share groups.")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="list all share groups")
    actions.add_argument("--describe", action="store_true", help="describe share groups: --members or --state")
    actions.add_argument("--delete", action="store_true", help="delete empty share groups")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset the start offsets of an empty group (one --to-* option, --topic or --all-topics)")
    actions.add_argument("--delete-offsets", action="store_true",
                         help="delete the start offsets of an empty group's topics (--topic)")
    add_connection_arguments(parser)
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="a group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every share group")
    parser.add_argument("--members", action="store_true", help="with --describe: the group's members")
    parser.add_argument("--state", action="store_true", help="with --describe: the group's state")
    parser.add_argument("--offsets", action="store_true", help="with --describe: start offsets and lag (the default)")
    parser.add_argument("--verbose", action="store_true", help="with --describe: also epochs")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P0,P1]",
                        help="with --reset-offsets or --delete-offsets: a topic (repeatable)")
    parser.add_argument("--all-topics", action="store_true",
                        help="with --reset-offsets: every topic the group has start offsets for")
    for flag, metavar, help_text in SHARE_RESET_OPTIONS:
        if metavar is None:
            parser.add_argument(flag, action="store_true", help="with --reset-offsets: " + help_text)
        else:
            parser.add_argument(flag, metavar=metavar, help="with --reset-offsets: " + help_text)
    parser.add_argument("--dry-run", action="store_true", help="with --reset-offsets: only show the new offsets")
    parser.add_argument("--execute", action="store_true", help="with --reset-offsets: set the new offsets")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-share-groups", ERROR_PREFIX, command,
                    command_error_prefix="Error: ")


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    action = check_arguments(args)
    run_client(settings, lambda client: COMMANDS[action](client, args))


def check_arguments(args: argparse.Namespace) -> str:
    action = one_action(args, ACTIONS)
    check_groups_and_views(args, action)
    if action == "reset_offsets":
        check_reset_arguments(args, SHARE_RESET_OPTIONS)
    elif action == "delete_offsets":
        if not args.topic or args.all_topics:
            raise UsageError(f"Option [{flag(action)}] takes the option [--topic]")
    elif args.topic or args.all_topics or args.dry_run or args.execute or \
            any(getattr(args, o[0][2:].replace("-", "_")) not in (None, False) for o in SHARE_RESET_OPTIONS):
        raise UsageError("--topic, --all-topics, the --to-* options, --dry-run and --execute can only be used with "
                         "--reset-offsets (--topic also with --delete-offsets)")
    return action


async def _group_ids(admin: ShareGroupAdmin, args: argparse.Namespace) -> list[str]:
    return await selected_groups(args, admin.list_groups)


async def list_groups(client: KafkaClient, _args: argparse.Namespace) -> None:
    for group in await ShareGroupAdmin(GroupAdmin(client)).list_groups():
        print(group.group_id)


async def describe(client: KafkaClient, args: argparse.Namespace) -> None:
    admin = ShareGroupAdmin(GroupAdmin(client))
    for group_id in await _group_ids(admin, args):
        try:
            group = await admin.describe(group_id)
        except KafkaClientError as exc:
            if isinstance(exc, ResponseError) and exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
                raise CommandError(f"Share group '{group_id}' does not exist.") from None
            raise
        if args.state:
            print_state(group, args.verbose)
            continue
        if not args.members:
            print_offsets(group_id, await admin.describe_offsets(group_id), args.verbose)
            continue
        if not group.members:
            print(f"\nShare group '{group_id}' has no active members.", file=sys.stderr)
            continue
        print_members(group, args.verbose)


async def delete(client: KafkaClient, args: argparse.Namespace) -> None:
    groups = GroupAdmin(client)
    ids = await _group_ids(ShareGroupAdmin(groups), args)
    failures = []
    for group_id in ids:
        try:
            await groups.delete_group(group_id)
        except KafkaClientError as exc:
            failures.append(f"Group '{group_id}' could not be deleted due to: {exc}")
    if failures:
        raise CommandError("Deletion of some share groups failed: " + " ".join(failures))
    print(f"Deletion of requested share groups ({', '.join(repr(g) for g in ids)}) was successful.")


async def reset_offsets(client: KafkaClient, args: argparse.Namespace) -> None:
    admin = ShareGroupAdmin(GroupAdmin(client))
    if not (args.dry_run or args.execute):
        print(NO_ACTION_WARNING, file=sys.stderr)
    option = chosen_reset(args, SHARE_RESET_OPTIONS)
    for group_id in await _group_ids(admin, args):
        state = await _state(admin, group_id)
        if state not in (None, "Empty"):
            raise CommandError(f"Share group '{group_id}' is not empty.")
        current = {} if state is None else \
            {o.partition: o.start_offset for o in await admin.describe_offsets(group_id)}
        plan = await plan_reset_from(AdminClient(client), group_id, current, args, option)
        print_reset(plan)
        if args.execute:
            await admin.alter_offsets(group_id, plan.offsets)


async def delete_offsets(client: KafkaClient, args: argparse.Namespace) -> None:
    admin = ShareGroupAdmin(GroupAdmin(client))
    topics = list(dict.fromkeys(t.partition(":")[0] for t in args.topic))
    for group_id in await _group_ids(admin, args):
        state = await _state(admin, group_id)
        if state is None:
            raise CommandError(f"Share group '{group_id}' does not exist.")
        if state != "Empty":
            raise CommandError(f"Share group '{group_id}' is not empty.")
        answers = await admin.delete_offsets(group_id, topics)
        rows = [[topic, "Successful" if code is ErrorCode.NONE else f"Error: {code.message}"]
                for topic, code in answers.items()]
        print("\n" + "\n".join(table(("TOPIC", "STATUS"), rows, [width(topics), None])))
        print()
        if any(code is not ErrorCode.NONE for code in answers.values()):
            raise CommandError(f"Deletion of some offsets of share group '{group_id}' failed.")


async def _state(admin: ShareGroupAdmin, group_id: str) -> str | None:
    """The share group's state; None when there is no such group."""
    try:
        return (await admin.describe(group_id)).state
    except ResponseError as exc:
        if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        raise


def print_offsets(group_id: str, offsets: list[ShareOffset], verbose: bool) -> None:
    header = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    cells = [[group_id, o.partition.topic, str(o.partition.partition), _known(o.start_offset), _known(o.lag)]
             for o in offsets]
    if verbose:
        header[3:3] = ["LEADER-EPOCH"]
        for cell, offset in zip(cells, offsets):
            cell[3:3] = [_known(offset.leader_epoch)]
    widths: list[int | None] = [width([group_id]), width([c[1] for c in cells]), 10, *([15] * (len(header) - 4)),
                                None]
    print("\n" + "\n".join(table(header, cells, widths)))
    print()


def _known(value: int) -> str:
    return text(value if value >= 0 else None)


def print_state(group: ShareGroupDescription, verbose: bool) -> None:
    coordinator = f"{group.coordinator.host}:{group.coordinator.port}  ({group.coordinator.node_id})"
    header = ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"]
    row = [group.group_id, coordinator, group.state, str(len(group.members))]
    widths: list[int | None] = [max(25, len(group.group_id)), max(25, len(coordinator)), 15, None]
    if verbose:
        header[-1:] = ["GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
        row[-1:] = [str(group.group_epoch), str(group.assignment_epoch), str(len(group.members))]
        widths[-1:] = [15, 16, None]
    print("\n" + "\n".join(table(header, [row], widths)))
    print()


def print_members(group: ShareGroupDescription, verbose: bool) -> None:
    members = sorted(group.members, key=lambda m: m.member_id)
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    cells = [[group.group_id, m.member_id, m.host, m.client_id, str(len(m.assignment)),
              assignment_text(m.assignment)] for m in members]
    widths: list[int | None] = [width([group.group_id]), *(width([c[i] for c in cells]) for i in (1, 2, 3)), 15, None]
    if verbose:
        header[-1:] = ["MEMBER-EPOCH", "ASSIGNMENT"]
        for cell, member in zip(cells, members):
            cell[-1:] = [str(member.member_epoch), cell[-1]]
        widths[-1:] = [15, None]
    print("\n" + "\n".join(table(header, cells, widths)))
    print()


COMMANDS = {"list": list_groups, "describe": describe, "delete": delete, "reset_offsets": reset_offsets,
            "delete_offsets": delete_offsets}
