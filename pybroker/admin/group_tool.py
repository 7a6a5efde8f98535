"""What `pybroker consumer-groups` and `pybroker share-groups` share, as Kafka's ConsumerGroupCommand and
ShareGroupCommand do: one action per run, the groups it acts on (--group, repeatable, or --all-groups), the
--describe views, and Java's column tables (left-aligned, each column at least 15 wide, `-` for nothing)."""

from __future__ import annotations

import argparse
from typing import Awaitable, Callable, Sequence

from pybroker.client.command_line import UsageError
from pybroker.client.groups import ListedGroup
from pybroker.common.topic import TopicPartition

MIN_COLUMN = 15
MISSING = "-"
VIEWS = ("members", "state", "offsets")


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def one_action(args: argparse.Namespace, actions: Sequence[str]) -> str:
    """The one action chosen, or Kafka's usage error naming them all."""
    chosen = [a for a in actions if getattr(args, a)]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: " + ", ".join(map(flag, actions)))
    return chosen[0]


def check_groups_and_views(args: argparse.Namespace, action: str) -> None:
    """Every action but --list names its groups, one way; --members, --state and --offsets go with --describe,
    one at a time."""
    if action != "list" and not args.group and not args.all_groups:
        raise UsageError(f"Option [{flag(action)}] takes one of these options: [--all-groups], [--group]")
    if args.group and args.all_groups:
        raise UsageError("Option [--group] can't be used with option [--all-groups]")
    views = [view for view in VIEWS if getattr(args, view)]
    if action != "describe" and views:
        raise UsageError("--members, --state and --offsets can only be used with --describe")
    if len(views) > 1:
        raise UsageError("Option [--describe] takes at most one of these options: [--members], [--offsets], "
                         "[--state]")


async def selected_groups(args: argparse.Namespace, listed: Callable[[], Awaitable[list[ListedGroup]]]) -> list[str]:
    """--all-groups: every group ``listed`` gives; else the --group ids, each once, in the order given."""
    if args.all_groups:
        return [g.group_id for g in await listed()]
    return list(dict.fromkeys(args.group))


def width(values: Sequence[str]) -> int:
    return max([MIN_COLUMN, *map(len, values)])


def table(header: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[int | None]) -> list[str]:
    """Java's `%-Ns` columns joined by one space; a width of None leaves the column unpadded."""
    def line(cells: Sequence[str]) -> str:
        return " ".join(cell if w is None else cell.ljust(w) for cell, w in zip(cells, widths))
    return [line(header), *(line(r) for r in rows)]


def assignment_text(partitions: Sequence[TopicPartition]) -> str:
    """Kafka's `topic(0,1),other(2)`, or `-` when nothing is assigned."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions, key=lambda tp: (tp.topic, tp.partition)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or MISSING
