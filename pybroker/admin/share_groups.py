"""`pybroker share-groups`: kafka-share-groups.sh's --list, --describe (--members, --state) and --delete.

Tables in Kafka's ShareGroupCommand column layout (``group_tool.table``). The offsets view (``--describe``
alone or ``--offsets``), --reset-offsets and --delete-offsets need the share coordinator's offsets APIs
(DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets), which pybroker does not serve yet:
they end with an error saying so.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

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
from pybroker.client import KafkaClient, KafkaClientError
from pybroker.client.errors import ResponseError
from pybroker.client.groups import GroupAdmin
from pybroker.client.share_groups import ShareGroupAdmin, ShareGroupDescription
from pybroker.protocol.error_codes import ErrorCode

ERROR_PREFIX = "Error: Executing share group command failed due to "
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
NOT_SERVED = ("{} needs the share group offsets APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets, "
              "DeleteShareGroupOffsets), which this broker does not serve yet")


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker share-groups", description="List, describe or delete share groups.")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="list all share groups")
    actions.add_argument("--describe", action="store_true", help="describe share groups: --members or --state")
    actions.add_argument("--delete", action="store_true", help="delete empty share groups")
    actions.add_argument("--reset-offsets", action="store_true", help="not served yet (share group offsets APIs)")
    actions.add_argument("--delete-offsets", action="store_true", help="not served yet (share group offsets APIs)")
    add_connection_arguments(parser)
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="a group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every share group")
    parser.add_argument("--members", action="store_true", help="with --describe: the group's members")
    parser.add_argument("--state", action="store_true", help="with --describe: the group's state")
    parser.add_argument("--offsets", action="store_true", help="with --describe: not served yet")
    parser.add_argument("--verbose", action="store_true", help="with --describe: also epochs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-share-groups", ERROR_PREFIX, command,
                    command_error_prefix="Error: ")


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    action = check_arguments(args)
    run_client(settings, lambda client: COMMANDS[action](client, args))


def check_arguments(args: argparse.Namespace) -> str:
    action = one_action(args, ACTIONS)
    if action in ("reset_offsets", "delete_offsets"):
        raise UsageError(NOT_SERVED.format(flag(action)))
    check_groups_and_views(args, action)
    if action == "describe" and not (args.members or args.state):
        raise UsageError(NOT_SERVED.format("--describe --offsets (the default view)"))
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


COMMANDS = {"list": list_groups, "describe": describe, "delete": delete}
