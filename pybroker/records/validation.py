"""Produce-path validation of a client's batch, as Kafka's LogValidator does it (RECORDS.md §1.1-1.3).

A batch whose CRC is right can still hold records no consumer can read: a records count the
records do not match, records running past the batch, a header key of negative size, a
compressed payload that does not decompress, offsets the log end would jump over. Kafka refuses
all of them at produce time, and so does :func:`validate_produced_batch`:

- batch header rules (offset range, count, control batches, sequences): INVALID_RECORD;
- the records themselves, walked once at byte level (varints over the buffer, no Record objects;
  vectorized for large batches by :mod:`.record_scan` when numpy is installed (the ``numpy`` extra), in C
  by ``_walk`` in the compiled build, this module's walk being the reference):
  INVALID_RECORD; a compressed payload is decompressed first (Kafka does too), bounded so a
  compression bomb is refused once its output passes the limit (RECORD_TOO_LARGE), a codec
  failure is CORRUPT_MESSAGE;
- rules about single records (keys on compacted topics, timestamps): INVALID_RECORD or
  INVALID_TIMESTAMP with each record named (KIP-467), see :class:`RecordValidationError`.

A big batch takes milliseconds (decompressing tens of MiB, walking a million records), which the broker
does not spend on its event loop: with a ``budget`` the check gives up (:class:`OverBudget`) as soon as
the records to walk are found larger, so the caller can check the batch again on another thread,
where ``pause`` lets the loop take the GIL back now and then.
"""

from __future__ import annotations

import __future__
import inspect
import linecache
import re
import textwrap
from dataclasses import dataclass
from typing import Callable, Final, cast

from mypy_extensions import i64

from .batch import BatchHeader, RecordBatch
from .compression import decompress
from .constants import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from .errors import InvalidRecordError, RecordTooLargeError, RecordValidationError

__all__ = ["ProducePolicy", "OverBudget", "validate_produced_batch", "max_decompressed_bytes"]

LONG_MAX = 2**63 - 1
MIN_RECORDS = 80
"""From this many records on the pure build's walk is vectorized (:mod:`.record_scan`): below, numpy's fixed
cost per operation outweighs the per-record saving. That module (and numpy) loads with the first such batch,
not at the broker's start."""
COMPILED_WALK: Final = not __file__.endswith(".py")
"""mypyc compiled this module (the compiled build): its walk checks a record in about 18 ns, below numpy's
175-215 ns at every batch size, so record_scan is not used (28 ns with positions and sizes as Python ints; as
``i64`` they are C integers, with no tag checks or calls per operation). It reads ``bytes`` at C speed but anything else
(the produced batch is a memoryview of the request) through the object protocol: 2,000 against 270 us for
9,500 records of 100 B, where copying the megabyte out takes 24 us. So this build walks a copy of the records,
the interpreted one (which indexes a view and bytes alike, within 1-3%) walks them in place.

The compiled build has a faster walk still, in C (``_walk.c``, 6-9 ns a record, reading a view in place): it
runs first and proves a batch valid or leaves it to this module's walk (on a copy), as record_scan does in the
pure build. On W1's lz4 batches it cut validation from 29 to 20 ns per 100-byte message (measured in process)."""

Scan = Callable[[bytes | memoryview, int], "tuple[int, int, bool] | None"]
CScan = Callable[[bytes | memoryview, int, "Callable[[], None] | None", int], "tuple[int, int, bool] | None"]


def _c_scan() -> CScan | None:
    """``_walk.scan`` in the compiled build, if it was built for this Python (else this module's walk runs)."""
    if not COMPILED_WALK:
        return None
    try:
        from ._walk import scan
    except ImportError:
        return None
    return scan


C_SCAN: Final = _c_scan()

_vectorized: list[Scan | None] = []  # resolved at the first large batch: record_scan's walk, or None without numpy


def vectorized_scan() -> Scan | None:
    """record_scan's walk, or None in the compiled build or when numpy is not installed (every batch is then
    walked here)."""
    if not _vectorized:
        _vectorized.append(None if COMPILED_WALK else _numpy_scan())
    return _vectorized[0]


def _numpy_scan() -> Scan | None:
    try:
        from .record_scan import scan_records
    except ImportError:  # numpy is an optional extra
        return None
    return scan_records

_MIN_DECOMPRESSED_LIMIT = 64 << 20
_DECOMPRESSED_LIMIT_FACTOR = 64


def max_decompressed_bytes(max_message_bytes: int) -> int:
    """How far a produced batch's records may decompress: 64x max.message.bytes, at least 64 MiB.

    Kafka streams the records and has no such limit; pybroker holds them in memory while it
    checks them, so it needs one. Past it the batch is refused with RECORD_TOO_LARGE, on which
    the Java producer splits the batch and retries.
    """
    return max(_MIN_DECOMPRESSED_LIMIT, _DECOMPRESSED_LIMIT_FACTOR * max_message_bytes)


@dataclass(frozen=True, slots=True)
class ProducePolicy:
    """The topic settings LogValidator reads (message.timestamp.* and cleanup.policy)."""

    compacted: bool = False
    log_append_time: bool = False
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    max_decompressed_bytes: int = _MIN_DECOMPRESSED_LIMIT


class OverBudget(Exception):
    """The batch's records (decompressed) are more bytes than the caller's ``budget``: nothing was decided."""


PAUSE_EVERY = 1 << 12
"""Records walked between two calls of ``pause``: the loop waits for the GIL that long at most, each time it
needs it while a big batch is checked. Measured on the compiled build (40,000 records of 1 KiB in lz4, another
connection's ApiVersions sent one after another, machine loaded 4x): the longest round trip 34-91 ms at 32,768,
17-46 ms at 4,096, 11-18 ms at 1,024; the walk of a million one-byte records took about as long at 4,096 as at
32,768 (89-156 ms against 125-220 ms, noisy), 145-300 ms at 1,024."""


def validate_produced_batch(batch: RecordBatch, policy: ProducePolicy, now_ms: int, partition: str,
                            header: BatchHeader | None = None, budget: int = -1,
                            pause: Callable[[], None] | None = None) -> int:
    """Kafka's produce checks of one client batch whose framing and CRC are already checked
    (``header``: its fields, when the caller has unpacked them already).

    Returns the largest record timestamp (NO_TIMESTAMP if none), which Kafka writes into the
    header's maxTimestamp rather than trusting the producer's. Raises InvalidRecordError,
    RecordValidationError, CorruptRecordError or RecordTooLargeError; OverBudget when ``budget`` (>= 0)
    is less than the records' bytes, having decompressed at most that many. ``pause`` is called every
    PAUSE_EVERY records walked: compiled code never lets go of the GIL on its own.
    """
    h = batch.header() if header is None else header
    if h.base_offset != 0:
        raise InvalidRecordError(f"The baseOffset of the record batch in the append to {partition} should be 0, "
                                 f"but it is {h.base_offset}")
    last = h.base_offset + h.last_offset_delta
    if h.last_offset_delta + 1 <= 0:
        raise InvalidRecordError(f"Batch has an invalid offset range: [{h.base_offset}, {last}] "
                                 f"in topic partition {partition}")
    if h.records_count <= 0:
        raise InvalidRecordError(f"Invalid reported count for record batch: {h.records_count} "
                                 f"in topic partition {partition}")
    if h.records_count != h.last_offset_delta + 1:
        raise InvalidRecordError(f"Inconsistent batch offset range [{h.base_offset}, {last}] and count of records "
                                 f"{h.records_count} in topic partition {partition}")
    if h.attributes & CONTROL_FLAG_MASK:
        raise InvalidRecordError(f"Clients are not allowed to write control records in topic partition {partition}")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(f"Invalid sequence number {h.base_sequence} in record batch with producerId "
                                 f"{h.producer_id} in topic partition {partition}")
    if h.attributes & TRANSACTIONAL_FLAG_MASK and h.producer_id < 0:
        # Kafka appends it; its transaction could then never end (no producer id to end it).
        raise InvalidRecordError(f"Transactional record batch without a producer id in topic partition {partition}")

    start = batch.position + RECORD_BATCH_OVERHEAD
    end = batch.position + h.batch_length + LOG_OVERHEAD
    codec = h.attributes & COMPRESSION_CODEC_MASK
    data: bytes | memoryview
    if 0 <= budget < (policy.max_decompressed_bytes if codec else end - start):
        data = _within_budget(codec, memoryview(batch.buffer)[start:end], budget)
    elif codec:
        data = decompress(codec, memoryview(batch.buffer)[start:end], policy.max_decompressed_bytes)
    else:
        data = memoryview(batch.buffer)[start:end]  # the interpreted and C walks index it in place
    count = h.records_count
    summary = None
    if C_SCAN is not None:
        summary = C_SCAN(data, count, pause, PAUSE_EVERY)
    elif not COMPILED_WALK and count >= MIN_RECORDS and (scan := vectorized_scan()) is not None:
        summary = scan(data, count)
    if summary is None:  # few records, or ones the faster walks leave to this one (which names the fault)
        data = _walkable(data)
        summary = _scan(data, count, partition, None, pause)
    min_delta, max_delta, keyless = summary

    append_time = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    if append_time:
        max_ts = h.max_timestamp  # records of a LogAppendTime batch all read as its maxTimestamp
        low_ts = high_ts = max_ts
    else:
        low_ts, high_ts = h.base_timestamp + min_delta, h.base_timestamp + max_delta
        max_ts = max(NO_TIMESTAMP, high_ts)
    if policy.log_append_time:
        bad_timestamps = append_time
    else:
        before, after = policy.timestamp_before_max_ms, policy.timestamp_after_max_ms
        bad_timestamps = (low_ts < now_ms - before or high_ts > now_ms + after
                          or append_time and max_ts == NO_TIMESTAMP)
    if (keyless and policy.compacted) or bad_timestamps:
        _raise_record_errors(_walkable(data), h.base_timestamp, max_ts if append_time else None, policy, now_ms,
                             partition, pause)
    return max_ts


def _walkable(data: bytes | memoryview) -> bytes:
    """The records as this module's walk takes them: bytes in the compiled build (mypyc indexes a view 7x
    slower, see COMPILED_WALK), the view itself in the interpreted one (which indexes both alike)."""
    if COMPILED_WALK and not isinstance(data, bytes):
        return bytes(data)
    return cast(bytes, data)


def _within_budget(codec: int, records: memoryview, budget: int) -> bytes:
    """The records section, decompressed, if it is at most ``budget`` bytes; else OverBudget."""
    if not codec:
        raise OverBudget()
    try:
        return decompress(codec, records, budget)
    except RecordTooLargeError:  # past the budget, not (yet) past the policy's bound
        raise OverBudget() from None


def _raise_record_errors(data: bytes, base_timestamp: int, append_time: int | None,
                         policy: ProducePolicy, now_ms: int, partition: str, pause: Callable[[], None] | None) -> None:
    """The slow path, only for a batch already known to break a record rule: LogValidator's
    validateKey then validateTimestamp for each record, every error named with its index."""
    details: list[tuple[int, int, int]] = []
    _scan(data, -1, partition, details, pause)
    before, after = policy.timestamp_before_max_ms, policy.timestamp_after_max_ms
    errors: list[tuple[int, str]] = []
    invalid_timestamp = False
    for index, (ts_delta, key_size, value_size) in enumerate(details):
        timestamp = base_timestamp + ts_delta if append_time is None else append_time
        if policy.compacted and key_size < 0:
            errors.append((index, f"Compacted topic cannot accept message without key in topic partition {partition}"))
        elif not policy.log_append_time and timestamp != NO_TIMESTAMP:
            if now_ms - timestamp > before or timestamp - now_ms > after:
                invalid_timestamp = True
                errors.append((index, f"Timestamp {timestamp} of message with offset {index} is out of range. "
                                      f"The timestamp should be within [{_java_long(now_ms - before)}, "
                                      f"{_java_long(now_ms + after)}]"))
        elif append_time is not None:
            invalid_timestamp = True
            record = (f"DefaultRecord(offset={index}, timestamp={timestamp}, key={max(key_size, 0)} bytes, "
                      f"value={max(value_size, 0)} bytes)")
            errors.append((index, f"Invalid timestamp type in message {record}. Producer should not set "
                                  "timestamp type to LogAppendTime."))
    if errors:
        raise RecordValidationError(errors, invalid_timestamp)


def _java_long(value: int) -> int:
    """``value`` wrapped to int64 as Java's long arithmetic does (the bounds Kafka prints)."""
    return (value + 2**63) % 2**64 - 2**63


def _varint(data: bytes, pos: i64) -> tuple[i64, i64]:
    """The zig-zag varint of at most 5 bytes at ``pos`` and the position after it: the varint scanner of the
    record walk (sizes, counts, offset deltas), which ``_inline`` writes out in place at each of its calls.
    Native 64-bit integers in the compiled build (a 5-byte varint holds 35 bits). Reading past the end raises
    IndexError (the walk turns it into InvalidRecordError)."""
    b: i64 = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    second: i64 = data[pos + 1]
    if second < 0x80:  # two bytes: most record lengths and value sizes
        b = (b & 0x7F) | (second << 7)
        return (b >> 1) ^ -(b & 1), pos + 2
    value, after = _varint_tail(data, pos + 1, b, 5)
    return value, after


def _varlong(data: bytes, pos: i64) -> tuple[int, i64]:
    """The zig-zag varint of at most 10 bytes at ``pos`` (a timestamp delta) and the position after it, as
    `_varint` but with the value a Python int: ten bytes hold 70 bits."""
    b: i64 = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    second: i64 = data[pos + 1]
    if second < 0x80:
        b = (b & 0x7F) | (second << 7)
        return (b >> 1) ^ -(b & 1), pos + 2
    value, after = _varint_tail(data, pos + 1, b, 10)
    return value, after


def _varint_tail(data: bytes, pos: int, first: int, max_bytes: int) -> tuple[int, int]:
    """Zig-zag varint whose first byte ``first`` (at pos - 1) has the continuation bit set."""
    value = first & 0x7F
    shift = 7
    for _ in range(max_bytes - 1):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise InvalidRecordError("Found invalid record structure: varint too long")


def _walk(data: bytes, count: int, partition: str, details: list[tuple[int, int, int]] | None,
          pause: Callable[[], None] | None = None) -> tuple[int, int, bool]:
    """Walk ``count`` records (all of them when -1, for the slow path) checking their structure
    as Java's DefaultRecord.readFrom does; -> (min timestamp delta, max timestamp delta, any keyless).
    ``pause`` is called every PAUSE_EVERY records.

    Keys, values and headers are skipped by their sizes, so a record allocates nothing. This is the
    reference; the broker runs ``_scan``, the same walk with every ``_varint`` call written out in place.
    """
    n: i64 = len(data)
    pos: i64 = 0
    index: i64 = 0
    wanted: i64 = count
    min_delta = LONG_MAX
    max_delta = -LONG_MAX
    keyless = False
    try:
        while index != wanted:
            if pos >= n:
                if wanted < 0:
                    break
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
            length, pos = _varint(data, pos)
            end = pos + length
            if length <= 0 or end > n:
                raise InvalidRecordError(f"Invalid record size: expected {length} bytes in record payload, but "
                                         f"instead the buffer has only {n - pos} remaining bytes.")
            pos += 1  # the attributes byte
            ts_delta, pos = _varlong(data, pos)
            if ts_delta < min_delta:
                min_delta = ts_delta
            if ts_delta > max_delta:
                max_delta = ts_delta
            offset_delta, pos = _varint(data, pos)
            if offset_delta != index:
                raise InvalidRecordError(f"Record {index} has offset delta {offset_delta}: the offsets in a batch "
                                         f"must run from 0 to its records count - 1 in topic partition {partition}")
            key_size, pos = _varint(data, pos)
            if key_size >= 0:
                pos += key_size
            elif key_size == -1:
                keyless = True
            else:
                raise InvalidRecordError(f"Invalid negative key size {key_size}")
            value_size, pos = _varint(data, pos)
            if value_size >= 0:
                pos += value_size
            elif value_size != -1:
                raise InvalidRecordError(f"Invalid negative value size {value_size}")
            if data[pos] == 0:  # no headers, the common case
                pos += 1
            else:
                headers, pos = _varint(data, pos)
                if headers < 0:
                    raise InvalidRecordError(f"Found invalid number of record headers {headers}")
                if headers > end - pos:
                    raise InvalidRecordError(f"Found invalid number of record headers. {headers} is larger than "
                                             "the remaining size of the buffer")
                for _ in range(headers):
                    size, pos = _varint(data, pos)
                    if size < 0:
                        raise InvalidRecordError(f"Invalid negative header key size {size}")
                    pos += size
                    size, pos = _varint(data, pos)
                    if size >= 0:
                        pos += size
                    elif size != -1:
                        raise InvalidRecordError(f"Invalid negative header value size {size}")
            if pos != end:
                raise InvalidRecordError(f"Invalid record size: expected to read {length} bytes in record payload, "
                                         f"but instead read {pos - end + length}")
            if details is not None:
                details.append((ts_delta, key_size, value_size))
            index += 1
            if pause is not None and index % PAUSE_EVERY == 0:
                pause()
    except IndexError:
        raise InvalidRecordError("Found invalid record structure") from None
    if pos != n:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    return min_delta, max_delta, keyless


_Walk = Callable[[bytes, int, str, "list[tuple[int, int, int]] | None", "Callable[[], None] | None"],
                 "tuple[int, int, bool]"]
_VARINT_CALL = re.compile(r"(?P<indent> *)(?P<name>\w+), pos = _var(?P<kind>int|long)\(data, pos\)")
# One and two bytes (most sizes, deltas and counts) without a call; longer ones in _varint_tail.
_VARINT_INLINE = """\
b = data[pos]
if b < 0x80:
    {name} = (b >> 1) ^ -(b & 1)
    pos += 1
elif data[pos + 1] < 0x80:
    b = (b & 0x7F) | (data[pos + 1] << 7)
    {name} = (b >> 1) ^ -(b & 1)
    pos += 2
else:
    {name}, pos = _varint_tail(data, pos + 1, b, {max_bytes})
"""


def _inline(walk: _Walk) -> _Walk:
    """``walk`` compiled again with each ``name, pos = _varint(data, pos[, max_bytes])`` line replaced by the
    scanner's body: a call costs more in CPython than the one- or two-byte decode it makes, and a record
    has six varints or more. Without the source (a frozen build) ``walk`` itself is returned."""
    try:
        source = textwrap.dedent(inspect.getsource(walk))
    except (OSError, TypeError):
        return walk
    lines = []
    for line in source.splitlines():
        call = _VARINT_CALL.fullmatch(line)
        if call is None:
            lines.append(line)
            continue
        body = _VARINT_INLINE.format(name=call["name"], max_bytes=10 if call["kind"] == "long" else 5)
        lines += [call["indent"] + part for part in body.splitlines()]
    text = "\n".join(lines) + "\n"
    filename = f"<{walk.__module__}.{walk.__name__}, varints inlined>"
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)  # tracebacks show it
    namespace: dict[str, object] = {}
    exec(compile(text, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True),  # noqa: S102
         walk.__globals__, namespace)
    return cast(_Walk, namespace[walk.__name__])


_scan = _inline(_walk)
