"""Zero-copy access to magic-v2 record batches (RECORDS.md §1.1-1.2).

This is the broker's hot path: produce validation, offset assignment, leader
epoch / LogAppendTime stamping and fetch serving all work on the 61-byte header
and the CRC only, never on individual records. Fields are read on demand with
``struct.unpack_from`` straight out of the caller's buffer; stamping writes
with ``struct.pack_into`` into a bytearray or writable memoryview.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final, NamedTuple

from .compression import decompress

# batch is the documented public home of the layout constants and enums, which live in .constants only to
# avoid an import cycle: every name of .constants.__all__ is imported here by name (mypyc's compiled star
# import binds only the names the module itself uses).
from .constants import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_HEADER,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG_MASK,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_RECORD_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    MIN_LEGACY_ENTRY_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    Compression,
    ControlRecordType,
    TimestampType,
)
from .crc import crc32c
from .constants import __all__ as _constants_all
from .errors import CorruptRecordError, RecordTooLargeError
from .record import Record, decode_records

# Read once as ints: compiled or not, each read of an Enum class's member on Python 3.11 goes through the slot
# EnumType.__getattr__ installs (about 850 instructions), and validation and stamping run once per produced batch.
_ZSTD: Final = int(Compression.ZSTD)
_LOG_APPEND_TIME: Final = int(TimestampType.LOG_APPEND_TIME)

__all__ = [
    *_constants_all,
    "BatchHeader",
    "RecordBatch",
    "iter_batches",
    "scan_batches",
    "validate_batch",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_base_offset_and_epoch",
    "set_log_append_time",
    "set_max_timestamp",
    "update_crc",
    "increment_sequence",
]

Buffer = bytes | bytearray | memoryview

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")
_I64: Final = struct.Struct(">q")
_OFFSET_LENGTH_EPOCH: Final = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: bytes 0-15
_INT32_MAX: Final = 0x7FFFFFFF


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequence arithmetic, wrapping from Integer.MAX_VALUE to 0 like Java."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


class BatchHeader(NamedTuple):
    """All 13 header fields from a single unpack, for code that needs several."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


class RecordBatch:
    """Read-only view of the batch starting at ``position`` in ``buf``; copies nothing.

    The view does not check anything on construction; call :func:`validate_batch`
    (or :meth:`is_valid`) before trusting untrusted bytes.
    """

    __slots__ = ("_buf", "_pos")

    def __init__(self, buf: Buffer, position: int = 0) -> None:
        self._buf = buf
        self._pos = position

    def __repr__(self) -> str:
        return (
            f"RecordBatch(position={self._pos}, base_offset={self.base_offset}, "
            f"last_offset={self.last_offset}, size={self.size}, "
            f"compression={self.attributes & COMPRESSION_CODEC_MASK}, "
            f"records_count={self.records_count})"
        )

    @property
    def buffer(self) -> Buffer:
        return self._buf

    @property
    def position(self) -> int:
        return self._pos

    def header(self) -> BatchHeader:
        # tuple.__new__, as the named tuple's _make does, without its Python frame: each append reads a header
        return tuple.__new__(BatchHeader, BATCH_HEADER.unpack_from(self._buf, self._pos))

    # --- raw header fields -------------------------------------------------------
    @property
    def base_offset(self) -> int:
        return _I64.unpack_from(self._buf, self._pos)[0]

    @property
    def batch_length(self) -> int:
        return _I32.unpack_from(self._buf, self._pos + LENGTH_OFFSET)[0]

    @property
    def size(self) -> int:
        """Total bytes of the batch including the 12-byte log overhead."""
        return _I32.unpack_from(self._buf, self._pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return _I32.unpack_from(self._buf, self._pos + PARTITION_LEADER_EPOCH_OFFSET)[0]

    @property
    def magic(self) -> int:
        return _I8.unpack_from(self._buf, self._pos + MAGIC_OFFSET)[0]

    @property
    def crc(self) -> int:
        return _U32.unpack_from(self._buf, self._pos + CRC_OFFSET)[0]

    @property
    def attributes(self) -> int:
        return _I16.unpack_from(self._buf, self._pos + ATTRIBUTES_OFFSET)[0]

    @property
    def last_offset_delta(self) -> int:
        return _I32.unpack_from(self._buf, self._pos + LAST_OFFSET_DELTA_OFFSET)[0]

    @property
    def base_timestamp(self) -> int:
        return _I64.unpack_from(self._buf, self._pos + BASE_TIMESTAMP_OFFSET)[0]

    @property
    def max_timestamp(self) -> int:
        return _I64.unpack_from(self._buf, self._pos + MAX_TIMESTAMP_OFFSET)[0]

    @property
    def producer_id(self) -> int:
        return _I64.unpack_from(self._buf, self._pos + PRODUCER_ID_OFFSET)[0]

    @property
    def producer_epoch(self) -> int:
        return _I16.unpack_from(self._buf, self._pos + PRODUCER_EPOCH_OFFSET)[0]

    @property
    def base_sequence(self) -> int:
        return _I32.unpack_from(self._buf, self._pos + BASE_SEQUENCE_OFFSET)[0]

    @property
    def records_count(self) -> int:
        return _I32.unpack_from(self._buf, self._pos + RECORDS_COUNT_OFFSET)[0]

    # --- derived fields ----------------------------------------------------------
    @property
    def compression(self) -> Compression:
        code = self.attributes & COMPRESSION_CODEC_MASK
        try:
            return Compression(code)
        except ValueError:
            raise CorruptRecordError(f"invalid compression codec id {code}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """baseTimestamp when the cleaner set bit 6, else None."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(base, self.last_offset_delta)

    # --- whole-batch operations --------------------------------------------------
    def compute_crc(self) -> int:
        """CRC-32C of [attributes, end of batch), the range the crc field covers."""
        start = self._pos + ATTRIBUTES_OFFSET
        end = self._pos + self.size
        if end > len(self._buf) or end < start:
            raise CorruptRecordError("batch extends past the end of the buffer")
        return crc32c(memoryview(self._buf)[start:end])

    def is_valid(self) -> bool:
        """True if the batch is structurally sound and its CRC matches."""
        try:
            validate_batch(self._buf, self._pos)
        except CorruptRecordError:
            return False
        return True

    def raw(self) -> memoryview:
        """A memoryview of exactly this batch (for writing to a segment or socket)."""
        return memoryview(self._buf)[self._pos : self._pos + self.size]

    def _records_section(self) -> Buffer:
        """The records after the batch header, decompressed."""
        h = self.header()
        if h.records_count < 0:
            raise CorruptRecordError(f"negative records count {h.records_count}")
        end = self._pos + h.batch_length + LOG_OVERHEAD
        if end > len(self._buf) or h.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError("batch extends past the end of the buffer")
        data: Buffer = memoryview(self._buf)[self._pos + RECORD_BATCH_OVERHEAD : end]
        codec = self.compression
        return data if codec == Compression.NONE else decompress(codec, data)

    def records(self) -> list[Record]:
        """Decompress and decode every record. Slow path: never used to append or serve."""
        data = self._records_section()
        h = self.header()
        log_append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
        return decode_records(
            data, h.records_count, h.base_offset, h.base_timestamp, log_append_time
        )

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())


# --------------------------------------------------------------------------- scanning


def iter_batches(buf: Buffer, start: int = 0) -> Iterator[RecordBatch]:
    """Yield consecutive complete batches from ``start``.

    Stops silently at a trailing partial batch (fetch responses are cut at
    max_bytes; a crash can leave half a batch in a segment). A length field too
    small for any record format is garbage and raises CorruptRecordError, like
    Java's ``ByteBufferLogInputStream``, so callers never loop on it.
    """
    n = len(buf)
    pos = start
    unpack = _I32.unpack_from
    while pos + LOG_OVERHEAD <= n:
        length = unpack(buf, pos + LENGTH_OFFSET)[0]
        if length < MIN_LEGACY_ENTRY_LENGTH:
            raise CorruptRecordError(f"record size {length} at position {pos} is too small")
        end = pos + LOG_OVERHEAD + length
        if end > n:
            return
        yield RecordBatch(buf, pos)
        pos = end


def scan_batches(buf: Buffer, start: int = 0) -> tuple[list[tuple[int, int]], int]:
    """-> ([(position, size), ...] of complete batches, end of the last complete one).

    ``end < len(buf)`` means a partial batch follows (same rules as iter_batches).
    """
    n = len(buf)
    pos = start
    unpack = _I32.unpack_from
    found: list[tuple[int, int]] = []
    while pos + LOG_OVERHEAD <= n:
        length = unpack(buf, pos + LENGTH_OFFSET)[0]
        if length < MIN_LEGACY_ENTRY_LENGTH:
            raise CorruptRecordError(f"record size {length} at position {pos} is too small")
        size = LOG_OVERHEAD + length
        if pos + size > n:
            break
        found.append((pos, size))
        pos += size
    return found, pos


def validate_batch(
    buf: Buffer, position: int = 0, *, max_size: int | None = None, check_counts: bool = True
) -> RecordBatch:
    """Check one batch's structure and CRC without decoding records.

    Order follows Java's produce path: framing, then size limit
    (RecordTooLargeError), then header sanity and CRC (CorruptRecordError).
    ``check_counts=False`` leaves records count and last offset delta to the caller
    (produce validation answers them with Kafka's INVALID_RECORD messages).
    """
    available = len(buf) - position
    if available < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"batch header truncated: {available} bytes, need {RECORD_BATCH_OVERHEAD}"
        )
    h = BATCH_HEADER.unpack_from(buf, position)
    length, magic, attributes, last_offset_delta, count = h[1], h[3], h[5], h[6], h[12]
    if magic != CURRENT_MAGIC:
        raise CorruptRecordError(f"unsupported magic {magic}, only v2 is accepted")
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {length} is below the minimum {MIN_BATCH_LENGTH}")
    size = length + LOG_OVERHEAD
    if size > available:
        raise CorruptRecordError(f"batch of {size} bytes is truncated to {available} bytes")
    if max_size is not None and size > max_size:
        raise RecordTooLargeError(f"batch of {size} bytes exceeds the maximum {max_size}")
    if attributes & COMPRESSION_CODEC_MASK > _ZSTD:
        raise CorruptRecordError(
            f"invalid compression codec id {attributes & COMPRESSION_CODEC_MASK}"
        )
    if check_counts and count < 0:
        raise CorruptRecordError(f"negative records count {count}")
    if check_counts and last_offset_delta < 0:
        raise CorruptRecordError(f"negative last offset delta {last_offset_delta}")
    if check_counts and count > last_offset_delta + 1:
        raise CorruptRecordError(f"{count} records cannot fit in offset delta {last_offset_delta}")
    mv = memoryview(buf)
    crc = crc32c(mv[position + ATTRIBUTES_OFFSET : position + size])
    if crc != h[4]:
        raise CorruptRecordError(f"CRC mismatch: stored {h[4]:#010x}, computed {crc:#010x}")
    return RecordBatch(buf, position)


# --------------------------------------------------------------------------- stamping


def set_base_offset(buf: bytearray | memoryview, position: int, offset: int) -> None:
    """Assign the batch's first offset. Not under the CRC, so nothing else changes."""
    _I64.pack_into(buf, position, offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Stamp the leader epoch at append time. Not under the CRC."""
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_base_offset_and_epoch(buf: bytearray | memoryview, position: int, offset: int, batch_length: int,
                              epoch: int) -> None:
    """`set_base_offset` and `set_partition_leader_epoch` in one write, as a leader append does both: the batch
    length between them is written again as ``batch_length`` (the caller's header read it)."""
    _OFFSET_LENGTH_EPOCH.pack_into(buf, position, offset, batch_length, epoch)


def update_crc(buf: bytearray | memoryview, position: int = 0) -> int:
    """Recompute and store the CRC after a change to a covered field; returns it."""
    size = _I32.unpack_from(buf, position + LENGTH_OFFSET)[0] + LOG_OVERHEAD
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    _U32.pack_into(buf, position + CRC_OFFSET, crc)
    return crc


def set_max_timestamp(
    buf: bytearray | memoryview,
    position: int,
    timestamp_type: TimestampType | int,
    max_timestamp: int,
) -> None:
    """Java ``DefaultRecordBatch.setMaxTimestamp``: set bit 3 and maxTimestamp, fix CRC.

    Both fields are covered by the CRC, so it is recomputed (over the still
    compressed records) unless nothing changed.
    """
    attrs = _I16.unpack_from(buf, position + ATTRIBUTES_OFFSET)[0]
    if timestamp_type == _LOG_APPEND_TIME:
        new_attrs = attrs | TIMESTAMP_TYPE_MASK
    else:
        new_attrs = attrs & ~TIMESTAMP_TYPE_MASK
    if (
        new_attrs == attrs
        and _I64.unpack_from(buf, position + MAX_TIMESTAMP_OFFSET)[0] == max_timestamp
    ):
        return
    _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, new_attrs)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    update_crc(buf, position)


def set_log_append_time(buf: bytearray | memoryview, position: int, timestamp_ms: int) -> None:
    """Stamp broker time for topics with message.timestamp.type=LogAppendTime."""
    set_max_timestamp(buf, position, _LOG_APPEND_TIME, timestamp_ms)
