"""The new offsets of `consumer-groups --reset-offsets`: which partitions, and where each one goes.

Kafka's rules: `--to-offset` and `--shift-by` are clamped into [earliest, latest] with a warning;
`--shift-by` needs a committed offset; `--to-datetime`/`--by-duration` take the first offset at or
after the time, or the latest offset when there is none; `--to-current` keeps the committed offset
(the latest one without).
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass, field
from datetime import datetime

from pybroker.common.progress import Progress
from pybroker.client.command_line import CommandError, UsageError
from pybroker.client import AdminClient, OffsetSpec
from pybroker.client.groups import GroupAdmin
from pybroker.common.topic import TopicPartition

#: (flag, metavar or None for a switch, help)
RESET_OPTIONS: tuple[tuple[str, str | None, str], ...] = (
    ("--to-earliest", None, "reset to the earliest offset"),
    ("--to-latest", None, "reset to the latest offset"),
    ("--to-current", None, "reset to the current (committed) offset"),
    ("--to-offset", "OFFSET", "reset to this offset"),
    ("--shift-by", "N", "move the committed offset by N (may be negative)"),
    ("--to-datetime", "YYYY-MM-DDTHH:mm:SS.sss", "reset to the first offset at or after this time "
                                                 "(local time unless it ends in Z or +hh:mm)"),
    ("--by-duration", "PnDTnHnMnS", "reset to the first offset at or after this long ago"),
)
#: partitions whose offsets are looked up per round of ListOffsets requests, so the progress line moves
LOOKUP_CHUNK = 100
DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ResetPlan:
    group_id: str
    offsets: dict[TopicPartition, int]
    warnings: list[str] = field(default_factory=list)


def chosen_reset(args: argparse.Namespace, options: tuple[tuple[str, str | None, str], ...] = RESET_OPTIONS) -> str:
    """The one reset option of ``options`` given (its dest name); UsageError for none or several."""
    chosen = [flag[2:].replace("-", "_") for flag, metavar, _ in options
              if getattr(args, flag[2:].replace("-", "_")) not in (None, False)]
    if len(chosen) != 1:
        raise UsageError("Option [--reset-offsets] takes exactly one of these options: "
                         + ", ".join(f"[{flag}]" for flag, _, _ in options))
    return chosen[0]


def check_reset_arguments(args: argparse.Namespace,
                          options: tuple[tuple[str, str | None, str], ...] = RESET_OPTIONS) -> str:
    """Kafka's usage rules of --reset-offsets: --dry-run or --execute, --topic or --all-topics, one of ``options``
    (its dest name is returned); a --to-datetime must parse."""
    if args.dry_run and args.execute:
        raise UsageError("Option [--reset-offsets] takes at most one of these options: [--dry-run], [--execute]")
    if bool(args.topic) == args.all_topics:
        raise UsageError("Option [--reset-offsets] takes exactly one of these options: [--all-topics], [--topic]")
    option = chosen_reset(args, options)
    if option == "to_datetime":
        parse_datetime(args.to_datetime)
    return option


def parse_topic_partitions(items: list[str]) -> dict[str, list[int] | None]:
    """`T` (every partition) or `T:0,2` per item."""
    topics: dict[str, list[int] | None] = {}
    for item in items:
        name, sep, partitions = item.partition(":")
        if not sep:
            topics[name] = None
            continue
        try:
            topics[name] = sorted({int(p) for p in partitions.split(",")})
        except ValueError:
            raise UsageError(f"Invalid partitions in --topic {item!r}: expected TOPIC:P0,P1,...") from None
    return topics


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 local or zoned date-time."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"Error parsing timestamp '{text}': use the format YYYY-MM-DDTHH:mm:SS.sss, "
                         "optionally followed by Z or +hh:mm") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    match = DURATION.fullmatch(text)
    if not match or text.upper() in ("P", "PT"):
        raise UsageError(f"Invalid duration '{text}': use the ISO-8601 format PnDTnHnMnS")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


async def partitions_to_reset(admin: AdminClient, committed: dict[TopicPartition, int],
                              args: argparse.Namespace) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(committed, key=lambda tp: (tp.topic, tp.partition))
    wanted = parse_topic_partitions(args.topic)
    described = await admin.describe_topics(list(wanted))
    partitions = []
    for name, chosen in wanted.items():
        existing = [p.partition for p in described[name].partitions]
        for p in chosen if chosen is not None else existing:
            if p not in existing:
                raise CommandError(f"Partition {p} of topic {name} does not exist")
            partitions.append(TopicPartition(name, p))
    return partitions


async def plan_reset(admin: AdminClient, groups: GroupAdmin, group_id: str, args: argparse.Namespace) -> ResetPlan:
    return await plan_reset_from(admin, group_id, await groups.committed_offsets(group_id), args, chosen_reset(args))


async def plan_reset_from(admin: AdminClient, group_id: str, committed: dict[TopicPartition, int],
                          args: argparse.Namespace, option: str) -> ResetPlan:
    """The new offsets by ``option``, from the group's current ones (a consumer group's committed offsets, a
    share group's start offsets)."""
    partitions = await partitions_to_reset(admin, committed, args)
    plan = ResetPlan(group_id, {})
    timestamp = None
    if option == "to_datetime":
        timestamp = parse_datetime(args.to_datetime)
    elif option == "by_duration":
        timestamp = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    with Progress(f"Resolving new offsets of group '{group_id}'", len(partitions), "partitions") as progress:
        for start in range(0, len(partitions), LOOKUP_CHUNK):
            chunk = partitions[start:start + LOOKUP_CHUNK]
            await _plan_chunk(admin, plan, option, args, committed, chunk, timestamp)
            progress.advance(len(chunk))
    return plan


async def _plan_chunk(admin: AdminClient, plan: ResetPlan, option: str, args: argparse.Namespace,
                      committed: dict[TopicPartition, int], partitions: list[TopicPartition],
                      timestamp: int | None) -> None:
    earliest = await _offsets(admin, partitions, OffsetSpec.EARLIEST)
    latest = await _offsets(admin, partitions, OffsetSpec.LATEST)
    found = await _offsets(admin, partitions, timestamp) if timestamp is not None else {}
    for tp in partitions:
        if option == "to_earliest":
            target = earliest[tp]
        elif option == "to_latest":
            target = latest[tp]
        elif option == "to_current":
            target = committed.get(tp, latest[tp])
        elif option == "to_offset":
            target = _clamp(plan, tp, _integer(args.to_offset, "--to-offset"), earliest[tp], latest[tp])
        elif option == "shift_by":
            if tp not in committed:
                raise CommandError(f"Cannot shift offset for partition {tp} since there is no current committed "
                                   "offset")
            target = _clamp(plan, tp, committed[tp] + _integer(args.shift_by, "--shift-by"), earliest[tp],
                            latest[tp])
        else:  # to_datetime, by_duration
            target = found[tp] if found[tp] >= 0 else latest[tp]
        plan.offsets[tp] = target


def _integer(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{flag} must be an integer, got {text!r}") from None


def _clamp(plan: ResetPlan, tp: TopicPartition, offset: int, earliest: int, latest: int) -> int:
    if offset > latest:
        plan.warnings.append(f"WARN: New offset ({offset}) is higher than latest offset for topic partition {tp}. "
                             f"Value will be set to {latest}")
        return latest
    if offset < earliest:
        plan.warnings.append(f"WARN: New offset ({offset}) is lower than earliest offset for topic partition {tp}. "
                             f"Value will be set to {earliest}")
        return earliest
    return offset


async def _offsets(admin: AdminClient, partitions: list[TopicPartition], spec: int) -> dict[TopicPartition, int]:
    offsets = {}
    for tp, listed in (await admin.list_offsets({tp: spec for tp in partitions})).items():
        if listed.error is not None:
            raise listed.error
        offsets[tp] = listed.offset
    return offsets
