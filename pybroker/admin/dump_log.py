"""`pybroker dump-log`: print segment files as kafka-dump-log.sh (DumpLogSegments) does.

It reads the files directly, never through a broker, so it also works on the data directory of a
stopped broker. A `.log` prints one line per batch (and one `| offset: ...` line per record with
`--deep-iteration` or `--print-data-log`, the latter adding keys and payloads); an `.index` prints
`offset: O position: P` entries and a `.timeindex` `timestamp: T offset: O` entries, each checked
against the `.log` beside it, with the mismatches listed at the end. `--verify-index-only` prints
only those.

File formats (Kafka's): an offset index entry is a 4-byte offset relative to the segment's base
offset and a 4-byte file position; a time index entry an 8-byte timestamp and a 4-byte relative
offset. Index files may be preallocated and zero-filled, so reading stops at the first all-zero
entry (never a real one: the first batch of a segment is not indexed, as in Kafka).
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from pybroker.client.command_line import EXIT_FAILURE, EXIT_OK, ToolParser
from pybroker.records import (
    ControlRecordType,
    CorruptRecordError,
    RecordBatch,
    RecordsError,
    TimestampType,
    iter_batches,
    parse_control_key,
    parse_end_txn_marker,
)

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
TIMESTAMP_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}
CONTROL_NAMES = {ControlRecordType.ABORT: "ABORT", ControlRecordType.COMMIT: "COMMIT"}


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker dump-log", description="Print the contents of log segment and index files.")
    parser.add_argument("--files", required=True, metavar="FILE[,FILE...]",
                        help="comma-separated .log, .index and .timeindex files to dump (required)")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print each record with its key and payload (implies --deep-iteration)")
    parser.add_argument("--deep-iteration", action="store_true", help="print each record, not just each batch")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the log without printing them")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    files = [f for f in args.files.split(",") if f]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        print(f"Error: {missing[0]} does not exist or is not a file", file=sys.stderr)
        return EXIT_FAILURE
    deep = args.deep_iteration or args.print_data_log
    for path in files:
        print(f"Dumping {path}")
        try:
            if path.endswith(".log"):
                dump_log(path, deep=deep, print_data=args.print_data_log)
            elif path.endswith(".index"):
                dump_offset_index(path, verify_only=args.verify_index_only)
            elif path.endswith(".timeindex"):
                dump_time_index(path, verify_only=args.verify_index_only)
            else:
                print(f"Ignoring unknown file {path}", file=sys.stderr)
        except BrokenPipeError:
            raise
        except (OSError, RecordsError) as exc:
            print(f"Error: cannot read {path}: {exc}", file=sys.stderr)
            return EXIT_FAILURE
    return EXIT_OK


def base_offset_of(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    if not stem.isdigit():
        raise CorruptRecordError(f"{os.path.basename(path)} is not named after a base offset")
    return int(stem)


@contextmanager
def mapped(path: str) -> Iterator[bytes | memoryview]:
    """The file's bytes, memory-mapped (segments can be large); empty files map to b""."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapping, memoryview(mapping) as view:
            yield view


def dump_log(path: str, *, deep: bool, print_data: bool) -> None:
    print(f"Log starting offset: {base_offset_of(path)}")
    with mapped(path) as data:
        valid_bytes = 0
        with suppress(CorruptRecordError):  # a corrupt tail ends the walk; reported below as invalid bytes
            for batch in iter_batches(data):
                print(batch_line(batch))
                if deep:
                    for line in record_lines(batch, print_data):
                        print(line)
                valid_bytes = batch.position + batch.size
        if valid_bytes < len(data):
            print(f"Found {len(data) - valid_bytes} invalid bytes at the end of {os.path.basename(path)}")


def batch_line(batch: RecordBatch) -> str:
    horizon = batch.delete_horizon_ms
    return (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
            f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} "
            f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {str(batch.is_transactional).lower()} isControl: {str(batch.is_control).lower()} "
            f"deleteHorizonMs: {'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'} "
            f"position: {batch.position} {TIMESTAMP_NAMES[batch.timestamp_type]}: {batch.max_timestamp} "
            f"size: {batch.size} magic: {batch.magic} compresscodec: {batch.compression.name.lower()} "
            f"crc: {batch.crc} isvalid: {str(batch.is_valid()).lower()}")


def record_lines(batch: RecordBatch, print_data: bool) -> Iterator[str]:
    timestamp_name = TIMESTAMP_NAMES[batch.timestamp_type]
    for record in batch.records():
        sequence = -1 if batch.base_sequence < 0 else \
            (batch.base_sequence + record.offset - batch.base_offset) & 0x7FFFFFFF
        line = (f"| offset: {record.offset} {timestamp_name}: {record.timestamp} "
                f"keySize: {-1 if record.key is None else len(record.key)} "
                f"valueSize: {-1 if record.value is None else len(record.value)} sequence: {sequence} "
                f"headerKeys: [{','.join(k for k, _ in record.headers)}]")
        if print_data and batch.is_control:
            control_type = parse_control_key(record.key)[1]
            if control_type in CONTROL_NAMES:
                line += (f" endTxnMarker: {CONTROL_NAMES[ControlRecordType(control_type)]} "
                         f"coordinatorEpoch: {parse_end_txn_marker(record.value)[1]}")
        elif print_data:
            if record.key is not None:
                line += f" key: {record.key.decode('utf-8', 'replace')}"
            if record.value is not None:
                line += f" payload: {record.value.decode('utf-8', 'replace')}"
        yield line


@dataclass
class IndexCheck:
    """Index entries that disagree with the log, reported after the entries as Kafka does."""

    path: str
    mismatches: list[str] = field(default_factory=list)

    def report(self) -> None:
        if self.mismatches:
            print(f"Mismatches in :{self.path}")
            for mismatch in self.mismatches:
                print(f"  {mismatch}")


def index_entries(path: str, entry: struct.Struct) -> Iterator[tuple[int, int]]:
    with mapped(path) as data:
        for slot in range(len(data) // entry.size):
            first, second = entry.unpack_from(data, slot * entry.size)
            if first == 0 and second == 0:
                return
            yield first, second


def log_batches(index_path: str) -> list[RecordBatch]:
    """The batches of the `.log` beside an index (empty when it is missing)."""
    log_path = index_path.rsplit(".", 1)[0] + ".log"
    if not os.path.isfile(log_path):
        return []
    with open(log_path, "rb") as handle:
        data = handle.read()
    try:
        return list(iter_batches(data))
    except CorruptRecordError:
        return []


def dump_offset_index(path: str, *, verify_only: bool) -> None:
    base = base_offset_of(path)
    by_position = {b.position: b for b in log_batches(path)}
    check = IndexCheck(path)
    for relative, position in index_entries(path, OFFSET_ENTRY):
        offset = base + relative
        batch = by_position.get(position)
        if batch is None or batch.last_offset != offset:
            check.mismatches.append(f"Index offset: {offset}, log offset: {-1 if batch is None else batch.last_offset}")
        if not verify_only:
            print(f"offset: {offset} position: {position}")
    check.report()


def dump_time_index(path: str, *, verify_only: bool) -> None:
    base = base_offset_of(path)
    batches = log_batches(path)
    check = IndexCheck(path)
    previous = -1
    next_batch = 0
    running_max = -1  # the largest batch timestamp up to the batch holding the entry's offset
    for timestamp, relative in index_entries(path, TIME_ENTRY):
        offset = base + relative
        while next_batch < len(batches) and (next_batch == 0 or batches[next_batch - 1].last_offset < offset):
            running_max = max(running_max, batches[next_batch].max_timestamp)
            next_batch += 1
        if running_max != timestamp:
            check.mismatches.append(f"Index timestamp: {timestamp}, log timestamp: {running_max}")
        if timestamp < previous:
            check.mismatches.append(f"Index timestamp: {timestamp} is smaller than the previous one: {previous}")
        previous = max(previous, timestamp)
        if not verify_only:
            print(f"timestamp: {timestamp} offset: {offset}")
    check.report()
