"""RECORDS.md §1.3 worked example: decode every field, rebuild byte-identically."""

from __future__ import annotations

import crc32c

from pybroker.records import (
    Compression,
    Record,
    RecordBatch,
    RecordInput,
    TimestampType,
    build_batch,
    validate_batch,
)


def test_example_is_83_bytes(worked_example: bytes) -> None:
    assert len(worked_example) == 83


def test_header_fields(worked_example: bytes) -> None:
    b = RecordBatch(worked_example)
    assert b.base_offset == 0
    assert b.batch_length == 0x47 == 71
    assert b.size == 83
    assert b.partition_leader_epoch == 0
    assert b.magic == 2
    assert b.crc == 0x4BCA8908
    assert b.compute_crc() == 0x4BCA8908 == crc32c.crc32c(worked_example[21:])
    assert b.attributes == 0
    assert b.compression is Compression.NONE
    assert b.timestamp_type is TimestampType.CREATE_TIME
    assert not b.is_transactional and not b.is_control and not b.has_delete_horizon
    assert b.last_offset_delta == 1
    assert b.last_offset == 1
    assert b.next_offset == 2
    assert b.base_timestamp == 1700000000000
    assert b.max_timestamp == 1700000000005
    assert b.producer_id == 1234
    assert b.producer_epoch == 5
    assert b.base_sequence == 7
    assert b.last_sequence == 8
    assert b.records_count == 2
    assert b.is_valid()
    assert bytes(b.raw()) == worked_example
    # fmt: off
    assert tuple(b.header()) == (
        0, 71, 0, 2, 0x4BCA8908, 0, 1, 1700000000000, 1700000000005, 1234, 5, 7, 2
    )
    # fmt: on


def test_records(worked_example: bytes) -> None:
    recs = validate_batch(worked_example).records()
    assert recs == [
        Record(0, 1700000000000, b"k", b"v", (("h", b"x"),), 0),
        Record(1, 1700000000005, None, b"vv", (), 0),
    ]


def test_rebuild_byte_identical(worked_example: bytes) -> None:
    built = build_batch(
        [
            RecordInput(b"k", b"v", [("h", b"x")], 1700000000000),
            RecordInput(None, b"vv", (), 1700000000005),
        ],
        producer_id=1234,
        producer_epoch=5,
        base_sequence=7,
        partition_leader_epoch=0,  # kafka-python leaves 0; the Java producer writes -1
    )
    assert built == worked_example


def test_rebuild_from_decoded_records(worked_example: bytes) -> None:
    recs = RecordBatch(worked_example).records()
    built = build_batch(
        recs, producer_id=1234, producer_epoch=5, base_sequence=7, partition_leader_epoch=0
    )
    assert built == worked_example


def test_tuple_inputs(worked_example: bytes) -> None:
    built = build_batch(
        [(b"k", b"v", (("h", b"x"),), 1700000000000), (None, b"vv", (), 1700000000005)],
        producer_id=1234,
        producer_epoch=5,
        base_sequence=7,
        partition_leader_epoch=0,
    )
    assert built == worked_example
