"""`pybroker console-producer`: stdin lines to a topic, as kafka-console-producer.sh sends them.

Each line is one record. With `--property parse.key=true` a line is `key<key.separator>value`
(separator a tab by default); with `parse.headers=true` it starts with `k1:v1,k2:v2<tab>`. Lines are
batched per partition until `--batch-size` bytes are waiting or no line came for `--timeout` ms
(Kafka's linger), or sent one by one with `--sync`. Failed sends print Kafka's one-line error and
make the exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from dataclasses import dataclass
from typing import Sequence

from pybroker.admin.options import parse_key_values
from pybroker.client.command_line import (
    EXIT_FAILURE,
    EXIT_OK,
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_client,
    run_tool,
)
from pybroker.client import KafkaClient
from pybroker.client.producer import Producer, parse_acks
from pybroker.records import Compression, RecordInput

ERROR_PREFIX = "ERROR "
CODECS = {c.name.lower(): c for c in Compression}
DEFAULT_BATCH_BYTES = 16384
DEFAULT_LINGER_MS = 1000


@dataclass(frozen=True, slots=True)
class LineFormat:
    """How a line splits into headers, key and value (Kafka's LineMessageReader properties)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    ignore_error: bool = False
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> LineFormat:
        def flag(name: str) -> bool:
            return properties.get(name, "false").strip().lower() == "true"

        def text(name: str, default: bytes) -> bytes:
            return properties[name].encode() if name in properties else default

        null_marker = properties.get("null.marker")
        line_format = cls(flag("parse.key"), text("key.separator", b"\t"), flag("ignore.error"),
                          flag("parse.headers"), text("headers.delimiter", b"\t"), text("headers.separator", b","),
                          text("headers.key.separator", b":"), None if null_marker is None else null_marker.encode())
        if line_format.parse_key and not line_format.key_separator:
            raise UsageError("key.separator must not be empty")
        return line_format

    def parse(self, line: bytes, number: int) -> RecordInput:
        """The record of one line (without its line break); CommandError when a separator is missing."""
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, found, body = rest.partition(self.headers_delimiter)
            if not found:
                self._missing("header delimiter", number, line)
            else:
                rest = body
                headers = [self._header(h) for h in head.split(self.headers_separator) if h]
        key = None
        if self.parse_key:
            key_part, found, value_part = rest.partition(self.key_separator)
            if found:
                key, rest = self._nullable(key_part), value_part
            else:
                self._missing("key separator", number, line)
        return RecordInput(key, self._nullable(rest), headers)

    def _header(self, text: bytes) -> tuple[str, bytes | None]:
        key, found, value = text.partition(self.headers_key_separator)
        return key.decode("utf-8", "replace"), self._nullable(value) if found else None

    def _nullable(self, field: bytes) -> bytes | None:
        return None if self.null_marker is not None and field == self.null_marker else field

    def _missing(self, what: str, number: int, line: bytes) -> None:
        if not self.ignore_error:
            raise CommandError(f"No {what} found on line number {number}: '{line.decode('utf-8', 'replace')}'")


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker console-producer",
                        description="Read lines from standard input and publish them to a topic.")
    add_connection_arguments(parser)
    parser.add_argument("--broker-list", dest="bootstrap_server", help=argparse.SUPPRESS)
    parser.add_argument("--topic", required=True, metavar="TOPIC", help="the topic to produce to (required)")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="line reader property: parse.key, key.separator, ignore.error, parse.headers, "
                             "headers.delimiter, headers.separator, headers.key.separator, null.marker (repeatable)")
    parser.add_argument("--compression-codec", nargs="?", const="gzip", default="none", metavar="CODEC",
                        help="none (default), gzip (if given without a value), snappy, lz4 or zstd")
    parser.add_argument("--request-required-acks", default="-1", metavar="ACKS",
                        help="acknowledgements the leader must have: all/-1 (default), 1 or 0")
    parser.add_argument("--request-timeout-ms", type=int, default=1500, metavar="MS",
                        help="how long the broker may wait for the acks (default 1500)")
    parser.add_argument("--sync", action="store_true", help="send every line on its own and wait for it")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_BYTES, metavar="BYTES",
                        help=f"bytes of lines to collect before sending (default {DEFAULT_BATCH_BYTES})")
    parser.add_argument("--timeout", type=int, default=DEFAULT_LINGER_MS, metavar="MS",
                        help="send what was collected after this long without a new line "
                             f"(default {DEFAULT_LINGER_MS})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "console-producer", ERROR_PREFIX, command)


def command(args: argparse.Namespace, settings: ClientSettings) -> int:
    line_format = LineFormat.from_properties(parse_key_values(args.property, "--property"))
    codec = CODECS.get(args.compression_codec.lower())
    if codec is None:
        raise UsageError(f"Unknown compression codec {args.compression_codec!r}: use one of {', '.join(CODECS)}")
    try:
        acks = parse_acks(args.request_required_acks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    failed = run_client(settings, lambda client: produce_stdin(client, args, line_format, codec, acks))
    return EXIT_FAILURE if failed else EXIT_OK


def read_lines(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | None]) -> None:
    """Thread body: every stdin line (line break removed) onto ``queue``, then None at end of input."""
    for line in sys.stdin.buffer:
        loop.call_soon_threadsafe(queue.put_nowait, line.rstrip(b"\n").removesuffix(b"\r"))
    loop.call_soon_threadsafe(queue.put_nowait, None)


async def produce_stdin(client: KafkaClient, args: argparse.Namespace, line_format: LineFormat,
                        codec: Compression, acks: int) -> int:
    """Send stdin's lines; return how many records failed."""
    producer = Producer(client, acks=acks, compression=codec, timeout_ms=args.request_timeout_ms)
    await producer.layout(args.topic)
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    threading.Thread(target=read_lines, args=(asyncio.get_running_loop(), queue), daemon=True).start()
    pending: list[RecordInput] = []
    pending_bytes = 0
    failed = 0
    number = 0
    try:
        while True:
            try:
                line = await asyncio.wait_for(queue.get(), args.timeout / 1000) if pending else await queue.get()
            except asyncio.TimeoutError:
                failed += await send(producer, args.topic, pending)
                pending, pending_bytes = [], 0
                continue
            if line is None:
                break
            number += 1
            pending.append(line_format.parse(line, number))
            pending_bytes += len(line)
            if args.sync or pending_bytes >= args.batch_size:
                failed += await send(producer, args.topic, pending)
                pending, pending_bytes = [], 0
    finally:
        failed += await send(producer, args.topic, pending)
    return failed


async def send(producer: Producer, topic: str, records: list[RecordInput]) -> int:
    """Send one round of records; print Kafka's error line per failed partition and return the failures."""
    if not records:
        return 0
    batches = await producer.partition_records(topic, records)
    failed = 0
    for tp, result in (await producer.send(batches)).items():
        if result.error is not None:
            count = len(batches[tp])
            failed += count
            print(f"ERROR Error when sending {count} message(s) to topic {topic} partition {tp.partition} "
                  f"with error: {result.error}", file=sys.stderr)
    return failed
