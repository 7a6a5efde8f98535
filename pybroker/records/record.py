"""Individual v2 records: decoding a records section and building whole batches.

This is the slow path (consumers, tests, the group/transaction coordinators,
control markers). The produce/fetch hot path works on whole batches through
:mod:`pybroker.records.batch` and never comes here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .compression import compress
from .constants import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG_MASK,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    Compression,
    TimestampType,
)
from .crc import crc32c
from .errors import CorruptRecordError
from .varint import (
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
    write_varint,
    write_varlong,
)

__all__ = [
    "Header",
    "Record",
    "RecordInput",
    "RecordLike",
    "build_batch",
    "decode_records",
    "encode_record",
    "now_ms",
    # varint helpers, re-exported for convenience
    "encode_varint",
    "encode_varlong",
    "encode_unsigned_varint",
    "decode_varint",
    "decode_varlong",
    "decode_unsigned_varint",
    "size_of_varint",
    "size_of_varlong",
    "size_of_unsigned_varint",
]

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with absolute offset and timestamp.

    With LogAppendTime batches ``timestamp`` is the batch's maxTimestamp, as
    Java's ``DefaultRecord.readFrom`` reports it.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class RecordInput:
    """A record to put in a batch. ``timestamp=None`` means "now" (ms).

    ``offset_delta=None`` means "next after the previous record" (position in
    the batch); set it to keep offset gaps, e.g. when the cleaner rewrites a batch.
    """

    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()
    timestamp: int | None = None
    offset_delta: int | None = None


RecordLike = RecordInput | Record | tuple[Any, ...]


def now_ms() -> int:
    """Wall-clock milliseconds, the unit of every Kafka timestamp."""
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- decoding


def decode_records(
    data: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
) -> list[Record]:
    """Decode ``count`` records from an *uncompressed* records section.

    Mirrors Java's checks: each record must consume exactly its length prefix,
    header keys must be non-negative in size, and no bytes may remain at the end.
    """
    records: list[Record] = []
    append = records.append
    n = len(data)
    pos = 0
    try:
        for _ in range(count):
            length, pos = decode_varint(data, pos)
            end = pos + length
            if length <= 0 or end > n:
                raise CorruptRecordError(f"invalid record length {length} at {pos}")
            attributes = data[pos]
            ts_delta, pos = decode_varlong(data, pos + 1)
            offset_delta, pos = decode_varint(data, pos)
            key_len, pos = decode_varint(data, pos)
            if key_len >= 0:
                key: bytes | None = bytes(data[pos : pos + key_len])
                pos += key_len
            else:
                key = None
            value_len, pos = decode_varint(data, pos)
            if value_len >= 0:
                value: bytes | None = bytes(data[pos : pos + value_len])
                pos += value_len
            else:
                value = None
            header_count, pos = decode_varint(data, pos)
            if header_count < 0:
                raise CorruptRecordError(f"invalid negative header count {header_count}")
            headers: list[Header] = []
            for _h in range(header_count):
                hk_len, pos = decode_varint(data, pos)
                if hk_len < 0:
                    raise CorruptRecordError(f"invalid negative header key size {hk_len}")
                hkey = bytes(data[pos : pos + hk_len]).decode("utf-8")
                pos += hk_len
                hv_len, pos = decode_varint(data, pos)
                if hv_len >= 0:
                    hval: bytes | None = bytes(data[pos : pos + hv_len])
                    pos += hv_len
                else:
                    hval = None
                headers.append((hkey, hval))
                if pos > end:
                    break
            if pos != end:
                raise CorruptRecordError(
                    f"record length {length} does not match its content ({pos - end:+d} bytes)"
                )
            ts = log_append_time if log_append_time is not None else base_timestamp + ts_delta
            append(Record(base_offset + offset_delta, ts, key, value, tuple(headers), attributes))
    except IndexError:
        raise CorruptRecordError("truncated record") from None
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
    if pos != n:
        raise CorruptRecordError(f"{n - pos} unconsumed bytes after {count} records")
    return records


# --------------------------------------------------------------------------- encoding


def _as_bytes(v: object, what: str) -> bytes | bytearray | memoryview | None:
    if v is None or isinstance(v, (bytes, bytearray, memoryview)):
        return v
    raise TypeError(f"record {what} must be bytes-like or None, not {type(v).__name__}")


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: Buffer | None,
    value: Buffer | None,
    headers: Iterable[tuple[str | bytes, Buffer | None]] = (),
    attributes: int = 0,
) -> None:
    """Append one length-prefixed record to ``out``."""
    body = bytearray((attributes & 0xFF,))
    write_varlong(body, timestamp_delta)
    write_varint(body, offset_delta)
    for field in (key, value):
        if field is None:
            body.append(1)  # zig-zag(-1)
        else:
            write_varint(body, len(field))
            body += field
    hdrs = list(headers)
    write_varint(body, len(hdrs))
    for hkey, hval in hdrs:
        hk = hkey.encode("utf-8") if isinstance(hkey, str) else bytes(hkey)
        write_varint(body, len(hk))
        body += hk
        if hval is None:
            body.append(1)
        else:
            write_varint(body, len(hval))
            body += hval
    write_varint(out, len(body))
    out += body


def _normalize(
    r: RecordLike, index: int, base_offset: int, now: int
) -> tuple[
    int, int, Buffer | None, Buffer | None, Sequence[tuple[str | bytes, Buffer | None]], int
]:
    """-> (offset_delta, timestamp, key, value, headers, attributes)."""
    if isinstance(r, RecordInput):
        delta = index if r.offset_delta is None else r.offset_delta
        ts = now if r.timestamp is None else r.timestamp
        return delta, ts, _as_bytes(r.key, "key"), _as_bytes(r.value, "value"), r.headers, 0
    if isinstance(r, Record):
        # A decoded record keeps its offset, relative to the new batch's base.
        k, v = _as_bytes(r.key, "key"), _as_bytes(r.value, "value")
        return r.offset - base_offset, r.timestamp, k, v, r.headers, r.attributes
    if isinstance(r, tuple) and 2 <= len(r) <= 4:
        headers = r[2] if len(r) > 2 else ()
        ts = r[3] if len(r) > 3 and r[3] is not None else now
        return index, ts, _as_bytes(r[0], "key"), _as_bytes(r[1], "value"), headers, 0
    raise TypeError(f"cannot build a record from {type(r).__name__}")


def build_batch(
    records: Iterable[RecordLike],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Build one complete magic-v2 batch with a valid CRC.

    Records may be :class:`RecordInput`, decoded :class:`Record` (offset kept
    relative to ``base_offset``) or tuples ``(key, value[, headers[, timestamp]])``.
    The codec is always applied as requested (unlike kafka-python, which falls
    back to NONE when compression does not help), so output is deterministic.
    ``last_offset_delta``/``max_timestamp`` override the computed values (empty
    batches kept by the cleaner, LogAppendTime); ``delete_horizon_ms`` sets
    attribute bit 6 and becomes baseTimestamp, as the log cleaner writes it.
    """
    now = now_ms()
    items = [_normalize(r, i, base_offset, now) for i, r in enumerate(records)]
    if items:
        first_ts = items[0][1]
        max_ts = max(it[1] for it in items)
    else:
        first_ts = max_ts = NO_TIMESTAMP
    base_ts = first_ts if delete_horizon_ms is None else delete_horizon_ms

    body = bytearray()
    prev = -1
    for delta, ts, key, value, headers, attrs in items:
        if delta <= prev:
            raise ValueError(f"offset deltas must increase: {delta} after {prev}")
        prev = delta
        encode_record(body, delta, ts - base_ts, key, value, headers, attrs)

    codec = Compression(compression)
    payload: Buffer = body if codec == Compression.NONE else compress(codec, body)

    attributes = codec & COMPRESSION_CODEC_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    if last_offset_delta is None:
        last_offset_delta = max(prev, 0)
    elif last_offset_delta < prev:
        raise ValueError(f"last_offset_delta {last_offset_delta} < last record delta {prev}")

    size = RECORD_BATCH_OVERHEAD + len(payload)
    buf = bytearray(size)
    BATCH_HEADER.pack_into(
        buf,
        0,
        base_offset,
        size - LOG_OVERHEAD,
        partition_leader_epoch,
        CURRENT_MAGIC,
        0,  # crc, filled below
        attributes,
        last_offset_delta,
        base_ts,
        max_ts if max_timestamp is None else max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(items),
    )
    buf[RECORD_BATCH_OVERHEAD:] = payload
    crc = crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])
    buf[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return bytes(buf)
