"""RecordBatch view, validation, scanning and in-place stamping."""

from __future__ import annotations

import struct

import pytest

from pybroker.records import (
    Compression,
    CorruptRecordError,
    RecordBatch,
    RecordInput,
    RecordTooLargeError,
    TimestampType,
    build_batch,
    iter_batches,
    scan_batches,
    set_base_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    update_crc,
    validate_batch,
)
from pybroker.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
    increment_sequence,
)

TS = 1_700_000_000_000


def make(n: int = 3, **kw: object) -> bytes:
    recs = [RecordInput(b"k%d" % i, b"value-%d" % i * 5, (("h", b"v"),), TS + i) for i in range(n)]
    return build_batch(recs, **kw)  # type: ignore[arg-type]


def test_constants() -> None:
    assert (RECORD_BATCH_OVERHEAD, LOG_OVERHEAD, MAGIC_OFFSET) == (61, 12, 16)
    assert MIN_BATCH_LENGTH == 49
    assert (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE) == (-1, -1, -1)
    assert [c.value for c in Compression] == [0, 1, 2, 3, 4]
    assert [t.value for t in TimestampType] == [0, 1]


def test_defaults_and_flags() -> None:
    b = RecordBatch(make())
    assert b.partition_leader_epoch == -1
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (-1, -1, -1, -1)
    assert b.records_count == 3 and b.last_offset_delta == 2
    assert b.base_timestamp == TS and b.max_timestamp == TS + 2
    t = RecordBatch(
        make(
            is_transactional=True,
            producer_id=9,
            producer_epoch=1,
            base_sequence=0,
            compression=Compression.LZ4,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
        )
    )
    assert t.is_transactional and not t.is_control
    assert t.compression is Compression.LZ4
    assert t.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert t.attributes == 0x10 | 0x08 | 3
    assert t.is_valid()


def test_last_sequence_wraps_like_java() -> None:
    b = RecordBatch(make(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert b.last_sequence == 0  # MAX-1, MAX, 0
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(5, 3) == 8


def test_slots_and_no_copy() -> None:
    buf = bytearray(make())
    b = RecordBatch(buf)
    with pytest.raises(AttributeError):
        b.foo = 1  # type: ignore[attr-defined]
    raw = b.raw()
    assert isinstance(raw, memoryview) and raw.obj is buf and len(raw) == b.size


def test_view_at_position() -> None:
    a, c = make(2), make(4, base_offset=2)
    buf = a + c
    b = RecordBatch(buf, len(a))
    assert b.base_offset == 2 and b.records_count == 4 and b.is_valid()
    assert bytes(b.raw()) == c
    assert [r.offset for r in b.records()] == [2, 3, 4, 5]


# --------------------------------------------------------------------------- validation


def test_validate_ok() -> None:
    data = make()
    b = validate_batch(data, max_size=len(data))
    assert b.records_count == 3


def test_validate_too_large() -> None:
    data = make()
    with pytest.raises(RecordTooLargeError):
        validate_batch(data, max_size=len(data) - 1)


@pytest.mark.parametrize("codec", list(Compression))
def test_flip_record_byte_is_crc_error(codec: Compression) -> None:
    data = bytearray(make(compression=codec))
    data[-3] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(data)
    assert not RecordBatch(data).is_valid()


@pytest.mark.parametrize("offset", [ATTRIBUTES_OFFSET + 1, 30, 40, 50, 55, 60])
def test_flip_header_byte_under_crc(offset: int) -> None:
    data = bytearray(make())
    data[offset] ^= 0x01
    with pytest.raises(CorruptRecordError):
        validate_batch(data)


def test_truncated() -> None:
    data = make()
    for cut in (0, 11, 60, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            validate_batch(data[:cut])


def test_bad_magic() -> None:
    for magic in (0, 1, 3, -1):
        data = bytearray(make())
        struct.pack_into(">b", data, MAGIC_OFFSET, magic)
        with pytest.raises(CorruptRecordError, match="magic"):
            validate_batch(data)


def test_short_length() -> None:
    data = bytearray(make())
    struct.pack_into(">i", data, 8, 48)
    with pytest.raises(CorruptRecordError, match="length"):
        validate_batch(data)


def _patch(data: bytes, fmt: str, offset: int, value: int) -> bytearray:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    update_crc(out, 0)  # make the CRC right so the field check is what fires
    return out


@pytest.mark.parametrize("code", [5, 6, 7])
def test_invalid_codec(code: int) -> None:
    data = _patch(make(), ">h", ATTRIBUTES_OFFSET, code)
    with pytest.raises(CorruptRecordError, match="compression"):
        validate_batch(data)
    with pytest.raises(CorruptRecordError):
        RecordBatch(data).records()


def test_negative_count_and_delta() -> None:
    with pytest.raises(CorruptRecordError, match="count"):
        validate_batch(_patch(make(), ">i", RECORDS_COUNT_OFFSET, -1))
    with pytest.raises(CorruptRecordError, match="delta"):
        validate_batch(_patch(make(), ">i", 23, -1))
    with pytest.raises(CorruptRecordError):
        validate_batch(_patch(make(), ">i", RECORDS_COUNT_OFFSET, 4))  # 4 records in 3 offsets


def test_records_count_mismatch_detected_on_decode() -> None:
    data = _patch(make(3), ">i", RECORDS_COUNT_OFFSET, 2)
    with pytest.raises(CorruptRecordError, match="unconsumed"):
        RecordBatch(data).records()


@pytest.mark.parametrize("codec", list(Compression))
def test_garbage_records_section_is_corrupt(codec: Compression) -> None:
    data = bytearray(make(compression=codec))
    data[RECORD_BATCH_OVERHEAD:] = b"\x7f" * (len(data) - RECORD_BATCH_OVERHEAD)
    update_crc(data, 0)
    validate_batch(data)  # header + CRC fine: records are never looked at
    with pytest.raises(CorruptRecordError):
        RecordBatch(data).records()


# --------------------------------------------------------------------------- scanning


def test_iter_and_scan_stop_at_partial_tail() -> None:
    a, b, c = make(1), make(2, base_offset=1), make(3, base_offset=3)
    full = a + b + c
    for cut in range(len(a) + len(b), len(full)):
        buf = full[:cut]
        batches = list(iter_batches(buf))
        assert [x.base_offset for x in batches] == [0, 1]
        positions, end = scan_batches(buf)
        assert positions == [(0, len(a)), (len(a), len(b))]
        assert end == len(a) + len(b)
    positions, end = scan_batches(full)
    assert end == len(full) and len(positions) == 3
    assert [x.position for x in iter_batches(full, len(a))] == [len(a), len(a) + len(b)]
    assert list(iter_batches(b"")) == [] and scan_batches(b"", 0) == ([], 0)


def test_iter_raises_on_garbage_length() -> None:
    buf = make(1) + b"\x00" * 40  # zero-filled tail (preallocated segment)
    it = iter_batches(buf)
    assert next(it).base_offset == 0
    with pytest.raises(CorruptRecordError):
        next(it)
    with pytest.raises(CorruptRecordError):
        scan_batches(buf)


# --------------------------------------------------------------------------- stamping


@pytest.mark.parametrize("codec", list(Compression))
def test_stamp_offset_and_epoch_keep_crc(codec: Compression) -> None:
    buf = bytearray(b"\x00" * 7 + make(compression=codec))
    crc_before = bytes(buf[7 + CRC_OFFSET : 7 + CRC_OFFSET + 4])
    set_base_offset(buf, 7, 1_000_000_000_000)
    set_partition_leader_epoch(buf, 7, 42)
    assert bytes(buf[7 + CRC_OFFSET : 7 + CRC_OFFSET + 4]) == crc_before
    b = validate_batch(buf, 7)
    assert b.base_offset == 1_000_000_000_000 and b.partition_leader_epoch == 42
    assert b.last_offset == 1_000_000_000_002
    assert [r.offset for r in b.records()] == [1_000_000_000_000 + i for i in range(3)]


def test_stamp_through_memoryview() -> None:
    buf = bytearray(make())
    mv = memoryview(buf)
    set_base_offset(mv, 0, 77)
    set_log_append_time(mv, 0, TS + 999)
    mv.release()
    assert validate_batch(buf).base_offset == 77


@pytest.mark.parametrize("codec", list(Compression))
def test_log_append_time_recomputes_crc(codec: Compression) -> None:
    buf = bytearray(make(compression=codec))
    old_crc = RecordBatch(buf).crc
    set_log_append_time(buf, 0, TS + 12345)
    b = validate_batch(buf)
    assert b.crc != old_crc
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert b.attributes & TIMESTAMP_TYPE_MASK
    assert b.compression is codec
    assert b.max_timestamp == TS + 12345
    assert b.base_timestamp == TS  # untouched
    # readers report the append time for every record
    assert {r.timestamp for r in b.records()} == {TS + 12345}


def test_set_max_timestamp_back_to_create_time_and_noop() -> None:
    buf = bytearray(make())
    original = bytes(buf)
    set_max_timestamp(buf, 0, TimestampType.CREATE_TIME, TS + 2)
    assert bytes(buf) == original  # unchanged -> untouched
    set_log_append_time(buf, 0, TS + 50)
    set_max_timestamp(buf, 0, TimestampType.CREATE_TIME, TS + 2)
    assert bytes(buf) == original


def test_stamping_rejects_bytes() -> None:
    with pytest.raises(TypeError):
        set_base_offset(make(), 0, 1)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- building


def test_build_offset_gaps_and_empty_batch() -> None:
    recs = [RecordInput(b"a", b"1", (), TS, 0), RecordInput(b"b", b"2", (), TS, 5)]
    b = RecordBatch(build_batch(recs, base_offset=10, last_offset_delta=9))
    assert b.last_offset == 19 and b.records_count == 2
    assert [r.offset for r in b.records()] == [10, 15]
    # rebuilding decoded records keeps their offsets
    again = RecordBatch(build_batch(b.records(), base_offset=10, last_offset_delta=9))
    assert bytes(again.raw()) == bytes(b.raw())
    empty = validate_batch(
        build_batch(
            [], base_offset=5, last_offset_delta=3, producer_id=1, producer_epoch=0, base_sequence=0
        )
    )
    assert empty.records_count == 0 and empty.last_offset == 8 and empty.records() == []
    assert empty.base_timestamp == -1 and empty.max_timestamp == -1
    with pytest.raises(ValueError):
        build_batch([RecordInput(b"a", b"1", (), TS, 3), RecordInput(b"b", b"2", (), TS, 3)])
    with pytest.raises(TypeError):
        build_batch([RecordInput("str", b"1")])  # type: ignore[arg-type]


def test_build_delete_horizon() -> None:
    b = RecordBatch(
        build_batch([RecordInput(b"k", None, (), TS)], delete_horizon_ms=TS + 86_400_000)
    )
    assert b.has_delete_horizon and b.delete_horizon_ms == TS + 86_400_000
    assert b.records()[0].timestamp == TS  # negative delta against the horizon
    assert b.records()[0].value is None


def test_build_default_timestamp_is_now() -> None:
    import time

    before = int(time.time() * 1000)
    b = RecordBatch(build_batch([(b"k", b"v")]))
    after = int(time.time() * 1000)
    assert before <= b.base_timestamp <= after
