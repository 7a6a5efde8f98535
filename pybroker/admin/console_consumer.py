"""`pybroker console-consumer`: print a topic's records, as kafka-console-consumer.sh does.

Without `--group` every partition of `--topic` (or just `--partition`) is read directly from the
latest offset, the earliest with `--from-beginning`, or `--offset`. With `--group` the tool joins the
group as a classic-protocol member (range assignor), starts from the group's committed offsets,
heartbeats, rejoins on rebalances and commits what it printed every 5 s and on exit. With the consumer
property `group.protocol=consumer` (`--consumer-property` or the `--consumer.config` file) it is a
KIP-848 member instead: the broker assigns, and partitions move one by one (a revoked partition's
position is committed before it is given up). The run ends after `--max-messages`, after
`--timeout-ms` without a record, or on Ctrl-C/SIGTERM, and always reports
`Processed a total of N messages` on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from pybroker.admin.record_format import RecordFormat
from pybroker.admin.options import parse_key_values
from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_client,
    run_tool,
)
from pybroker.client import AdminClient, KafkaClient, OffsetSpec
from pybroker.client.consumer_member import ConsumerGroupMember, ConsumerMemberSettings, Listeners
from pybroker.client.fetcher import ISOLATION_LEVELS, ConsumerRecord, Fetcher, FetchSettings
from pybroker.client.groups import GroupAdmin
from pybroker.client.membership import GroupMember
from pybroker.client.metadata import topic_layout
from pybroker.common.config import parse_properties
from pybroker.common.topic import TopicPartition
from pybroker.protocol.error_codes import ErrorCode

ERROR_PREFIX = "ERROR "
AUTO_COMMIT_INTERVAL_S = 5.0  # Kafka's auto.commit.interval.ms default
HEARTBEAT_INTERVAL_S = 3.0
RETRY_BACKOFF_S = 0.1
GROUP_PROTOCOLS = ("classic", "consumer")


@dataclass(frozen=True, slots=True)
class StartPosition:
    """Where reading starts without a committed offset: a ListOffsets spec, or an exact offset."""

    spec: int = OffsetSpec.LATEST
    exact: int | None = None


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker console-consumer",
                        description="Consume records from a topic and print them on standard output.")
    add_connection_arguments(parser)
    parser.add_argument("--topic", required=True, metavar="TOPIC", help="the topic to consume (required)")
    parser.add_argument("--group", metavar="GROUP", help="consume as a member of this consumer group")
    parser.add_argument("--partition", type=int, metavar="P", help="consume only this partition")
    parser.add_argument("--offset", metavar="OFFSET",
                        help="with --partition: earliest, latest (default) or a non-negative offset")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset when there is no committed offset")
    parser.add_argument("--max-messages", type=int, metavar="N", help="exit after printing N records")
    parser.add_argument("--timeout-ms", type=int, metavar="MS", help="exit after MS without a record")
    parser.add_argument("--isolation-level", default="read_uncommitted", metavar="LEVEL",
                        help="read_committed: only committed transactional records; read_uncommitted (default)")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="formatter property: print.timestamp, print.key, print.offset, print.partition, "
                             "print.headers, print.value, key.separator, line.separator, headers.separator, "
                             "null.literal (repeatable)")
    parser.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                        help="consumer property: group.protocol (classic, the default, or consumer), and for "
                             "group.protocol=consumer group.instance.id and group.remote.assignor (repeatable; "
                             "takes precedence over --consumer.config)")
    parser.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                        help="consumer properties file with the keys --consumer-property takes")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "console-consumer", ERROR_PREFIX, command)


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    start = check_arguments(args)
    protocol_settings = consumer_settings(args)
    record_format = RecordFormat.from_properties(parse_key_values(args.property, "--property"))
    consumed = [0]
    try:
        run_client(settings, lambda client: Consumer(client, args, start, record_format, consumed,
                                                     protocol_settings).run())
    finally:
        sys.stdout.flush()
        print(f"Processed a total of {consumed[0]} messages", file=sys.stderr)


def check_arguments(args: argparse.Namespace) -> StartPosition:
    """Kafka's ConsoleConsumer option checks; the start position they give."""
    if args.isolation_level not in ISOLATION_LEVELS:
        raise UsageError(f"Invalid isolation level {args.isolation_level!r}: use read_committed or "
                         "read_uncommitted")
    if args.group is not None and args.partition is not None:
        raise UsageError("Options group and partition cannot be specified together.")
    if args.max_messages is not None and args.max_messages <= 0:
        raise UsageError("--max-messages must be positive")
    if args.offset is not None:
        if args.partition is None:
            raise UsageError("The partition is required when offset is specified.")
        if args.from_beginning:
            raise UsageError("Options from-beginning and offset cannot be specified together.")
        if args.offset == "earliest":
            return StartPosition(OffsetSpec.EARLIEST)
        if args.offset == "latest":
            return StartPosition(OffsetSpec.LATEST)
        if not args.offset.isdigit():
            raise UsageError(f"The provided offset value '{args.offset}' is incorrect. Valid values are "
                             "'earliest', 'latest', or a non-negative long.")
        return StartPosition(OffsetSpec.LATEST, int(args.offset))
    return StartPosition(OffsetSpec.EARLIEST if args.from_beginning else OffsetSpec.LATEST)


def consumer_settings(args: argparse.Namespace) -> ConsumerMemberSettings | None:
    """Settings of a consumer-protocol member when the consumer properties ask for one, else None (classic)."""
    properties: dict[str, str] = {}
    if args.consumer_config:
        try:
            with open(args.consumer_config, encoding="utf-8") as handle:
                properties = parse_properties(handle.read())
        except OSError as exc:
            raise UsageError(f"Cannot read {args.consumer_config}: {exc.strerror}") from None
    properties.update(parse_key_values(args.consumer_property, "--consumer-property"))
    protocol = properties.get("group.protocol", "classic").strip().lower()
    if protocol not in GROUP_PROTOCOLS:
        raise UsageError(f"Invalid value {properties['group.protocol']} for configuration group.protocol: "
                         "String must be one of (case insensitive): CLASSIC, CONSUMER")
    if protocol == "classic":
        return None
    return ConsumerMemberSettings(instance_id=properties.get("group.instance.id") or None,
                                  server_assignor=properties.get("group.remote.assignor") or None)


class Consumer:
    """One console-consumer run: positions, the group membership if any, printing and commits."""

    def __init__(self, client: KafkaClient, args: argparse.Namespace, start: StartPosition,
                 record_format: RecordFormat, consumed: list[int],
                 protocol_settings: ConsumerMemberSettings | None = None) -> None:
        self.client = client
        self.topic: str = args.topic
        self.args = args
        self.start = start
        self.record_format = record_format
        self.consumed = consumed
        self.fetcher = Fetcher(client, FetchSettings(isolation_level=ISOLATION_LEVELS[args.isolation_level]))
        self.admin = AdminClient(client)
        self.member: GroupMember | ConsumerGroupMember | None = None
        if args.group and protocol_settings is not None:
            self.member = ConsumerGroupMember(GroupAdmin(client), args.group, [self.topic], protocol_settings,
                                              Listeners(self._revoked, self._assigned, self._lost))
        elif args.group:
            self.member = GroupMember(GroupAdmin(client), args.group, [self.topic])
        self.positions: dict[TopicPartition, int] = {}
        self.printed: dict[TopicPartition, int] = {}  # next offset after the last printed record
        self.pending: deque[ConsumerRecord] = deque()
        self.partition_count = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        layout = await topic_layout(self.client, self.topic, auto_create=True)
        if self.args.partition is not None and not 0 <= self.args.partition < len(layout.leaders):
            raise CommandError(f"Partition {self.args.partition} of topic {self.topic} does not exist")
        self.partition_count = len(layout.leaders)
        try:
            await self._assign()
            await self._consume()
        finally:
            if self.member is not None:
                await self.member.commit(self.printed)
                await self.member.leave()

    async def _assign(self) -> None:
        """Take partitions (from the group, or all/--partition) and set their starting positions."""
        if isinstance(self.member, ConsumerGroupMember):
            await self.member.join()  # the listeners set the positions
            return
        if self.member is not None:
            assigned = await self.member.join()
            committed = await self.member.groups.committed_offsets(self.member.group_id, assigned)
        else:
            partitions = range(self.partition_count) if self.args.partition is None else [self.args.partition]
            assigned, committed = [TopicPartition(self.topic, p) for p in partitions], {}
            if self.start.exact is not None:
                committed = {tp: self.start.exact for tp in assigned}
        self.positions = dict(committed)
        await self._reset([tp for tp in assigned if tp not in committed], self.start.spec)
        self.printed = {}

    async def _reset(self, partitions: list[TopicPartition], spec: int) -> None:
        if not partitions:
            return
        for tp, listed in (await self.admin.list_offsets({tp: spec for tp in partitions})).items():
            if listed.error is not None:
                raise listed.error
            self.positions[tp] = listed.offset

    async def _assigned(self, partitions: list[TopicPartition]) -> None:
        """Consumer protocol: start newly assigned partitions at their committed offsets."""
        assert self.member is not None
        committed = await self.member.groups.committed_offsets(self.member.group_id, partitions)
        self.positions.update(committed)
        await self._reset([tp for tp in partitions if tp not in committed], self.start.spec)

    async def _revoked(self, partitions: list[TopicPartition]) -> None:
        """Consumer protocol: stop reading these and commit what was printed of them before giving them up."""
        assert self.member is not None
        await self.member.commit({tp: self.printed[tp] for tp in partitions if tp in self.printed})
        await self._lost(partitions)

    async def _lost(self, partitions: list[TopicPartition]) -> None:
        gone = set(partitions)
        for tp in gone:
            self.positions.pop(tp, None)
            self.printed.pop(tp, None)
        kept = [r for r in self.pending if TopicPartition(r.topic, r.partition) not in gone]
        self.pending.clear()
        self.pending.extend(kept)

    async def _consume(self) -> None:
        pending = self.pending
        limit = self.args.max_messages
        timeout_s = None if self.args.timeout_ms is None else self.args.timeout_ms / 1000
        last_record = last_heartbeat = last_commit = time.monotonic()
        out = sys.stdout.buffer
        while not self.stop.is_set() and (limit is None or self.consumed[0] < limit):
            now = time.monotonic()
            if isinstance(self.member, ConsumerGroupMember):
                await self.member.poll()
            elif self.member is not None and now - last_heartbeat >= HEARTBEAT_INTERVAL_S:
                last_heartbeat = now
                if not await self.member.heartbeat():
                    await self.member.commit(self.printed)
                    await self._assign()
                    pending.clear()
            if self.member is not None and now - last_commit >= AUTO_COMMIT_INTERVAL_S:
                last_commit = now
                await self.member.commit(self.printed)
            if not pending:
                pending.extend(await self._fetch())
                if pending:
                    last_record = time.monotonic()
                elif timeout_s is not None and time.monotonic() - last_record >= timeout_s:
                    print("ERROR Error processing message, terminating consumer process: "
                          "org.apache.kafka.common.errors.TimeoutException", file=sys.stderr)
                    return
                continue
            record = pending.popleft()
            out.write(self.record_format.format(record))
            self.printed[TopicPartition(record.topic, record.partition)] = record.offset + 1
            self.consumed[0] += 1
            if not pending:
                out.flush()

    async def _fetch(self) -> list[ConsumerRecord]:
        """One fetch round over the assigned partitions; positions advance past what came back."""
        if not self.positions:
            await asyncio.sleep(RETRY_BACKOFF_S)
            return []
        records: list[ConsumerRecord] = []
        retry = False
        for tp, result in (await self.fetcher.fetch(self.positions)).items():
            if result.error is None:
                records.extend(result.records)
                self.positions[tp] = result.next_offset
            elif result.error.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                await self._reset([tp], self.start.spec)
            elif result.error.code.retriable:
                retry = True
            else:
                raise result.error
        if retry and not records:
            await asyncio.sleep(RETRY_BACKOFF_S)
        return records

