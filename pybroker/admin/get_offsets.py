"""`pybroker get-offsets`: `topic:partition:offset` lines, as kafka-get-offsets.sh (GetOffsetShell) prints.

`--time` is -1/latest, -2/earliest, -3/max-timestamp or a timestamp in ms (the earliest offset whose
record timestamp is at or after it). A partition without such an offset prints an empty offset.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from pybroker.admin.options import topic_filter
from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_admin,
    run_tool,
)
from pybroker.client import AdminClient, ListedOffset, OffsetSpec
from pybroker.common.topic import TopicPartition

ERROR_PREFIX = "Error occurred: "
TIME_NAMES = {"latest": OffsetSpec.LATEST, "earliest": OffsetSpec.EARLIEST, "max-timestamp": OffsetSpec.MAX_TIMESTAMP}


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker get-offsets", description="Print the offsets of topic partitions.")
    add_connection_arguments(parser)
    parser.add_argument("--broker-list", dest="bootstrap_server", help=argparse.SUPPRESS)
    parser.add_argument("--topic", metavar="TOPIC",
                        help="the topic(s) to get offsets for, a regular expression; all topics if not given")
    parser.add_argument("--partitions", metavar="P0,P1,...",
                        help="comma-separated partition ids; all partitions if not given")
    parser.add_argument("--time", default="-1", metavar="TIME",
                        help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, or a timestamp in ms")
    parser.add_argument("--exclude-internal-topics", action="store_true", help="leave internal topics out")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-get-offsets", ERROR_PREFIX, command)


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    timestamp = parse_time(args.time)
    partitions = parse_partitions(args.partitions)
    offsets = run_admin(settings, lambda admin: fetch_offsets(admin, args.topic, partitions, timestamp,
                                                              args.exclude_internal_topics))
    for tp, listed in sorted(offsets.items()):
        if listed.error is not None:
            print(f"Skip getting offsets for topic-partition {tp} due to error: {listed.error}", file=sys.stderr)
        else:
            print(f"{tp.topic}:{tp.partition}:{listed.offset if listed.offset >= 0 else ''}")


def parse_time(text: str) -> int:
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        value = int(text)
    except ValueError:
        value = -10
    if value < OffsetSpec.MAX_TIMESTAMP:
        raise UsageError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / "
                         "-3 or max-timestamp, or a specified long format timestamp")
    return value


def parse_partitions(text: str | None) -> set[int] | None:
    if text is None:
        return None
    try:
        return {int(p) for p in text.split(",")}
    except ValueError:
        raise UsageError(f"--partitions must be comma-separated partition ids, got {text!r}") from None


async def fetch_offsets(admin: AdminClient, pattern: str | None, partitions: set[int] | None, timestamp: int,
                        exclude_internal: bool) -> dict[TopicPartition, ListedOffset]:
    names = topic_filter(pattern, exclude_internal, await admin.list_topics(include_internal=not exclude_internal))
    described = await admin.describe_topics(names)
    wanted = [TopicPartition(name, p.partition) for name in names for p in described[name].partitions
              if partitions is None or p.partition in partitions]
    if not wanted:
        raise CommandError("Could not match any topic-partitions with the specified filters")
    return await admin.list_offsets({tp: timestamp for tp in wanted})
