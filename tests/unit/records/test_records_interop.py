"""Interop with kafka-python's and aiokafka's (C and pure-Python) v2 builders/readers.

Our batches must decode with their readers (CRC valid) and theirs with ours,
for every codec.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.record import default_records as aio_default
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder as KpMemoryBuilder

from pybroker.records import (
    Compression,
    Record,
    RecordBatch,
    RecordInput,
    build_batch,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)

CODECS = list(Compression)
TS = 1_700_000_000_000
PID, EPOCH, SEQ = 4321, 3, 17

# Compressible values so the third-party builders do not fall back to NONE.
INPUTS = [
    RecordInput(b"key-0", b"value " * 50, (("h1", b"a"), ("h2", None)), TS),
    RecordInput(None, b"tombstone? no, a value " * 20, (), TS + 7),
    RecordInput(b"key-2", None, (("\u00e9t\u00e9", b"\x00\xff"),), TS + 3),
    RecordInput(b"", b"", (), TS + 100),
]

BUILDERS: dict[str, Any] = {
    "kafka-python": KpBuilder,
    "aiokafka-c": aio_default.DefaultRecordBatchBuilder,
    "aiokafka-py": aio_default._DefaultRecordBatchBuilderPy,
}
READERS: dict[str, Any] = {
    "kafka-python": KpBatch,
    "aiokafka-c": aio_default.DefaultRecordBatch,
    "aiokafka-py": aio_default._DefaultRecordBatchPy,
}


def expected(base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, r.timestamp or 0, r.key, r.value, tuple(r.headers))
        for i, r in enumerate(INPUTS)
    ]


def their_records(batch: Any) -> list[Record]:
    return [
        Record(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
        for r in batch
    ]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("lib", list(BUILDERS))
def test_theirs_decode_with_ours(lib: str, codec: Compression) -> None:
    builder = BUILDERS[lib](
        magic=2,
        compression_type=int(codec),
        is_transactional=1,
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=SEQ,
        batch_size=1 << 20,
    )
    for i, r in enumerate(INPUTS):
        assert builder.append(i, r.timestamp, r.key, r.value, list(r.headers)) is not None
    data = bytes(builder.build())

    b = validate_batch(data)
    assert b.compression is codec
    assert b.size == len(data)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (PID, EPOCH, SEQ)
    assert b.last_sequence == SEQ + len(INPUTS) - 1
    assert b.is_transactional and not b.is_control
    assert b.records_count == len(INPUTS) and b.last_offset_delta == len(INPUTS) - 1
    assert b.max_timestamp == TS + 100
    assert b.records() == expected()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("lib", list(READERS))
def test_ours_decode_with_theirs(lib: str, codec: Compression) -> None:
    data = build_batch(
        INPUTS,
        compression=codec,
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=SEQ,
        is_transactional=True,
    )
    buf = bytearray(data)
    set_base_offset(buf, 0, 1000)
    set_partition_leader_epoch(buf, 0, 7)
    batch = READERS[lib](bytes(buf))
    assert batch.validate_crc()
    assert batch.base_offset == 1000
    assert batch.compression_type == codec
    assert batch.is_transactional
    assert batch.producer_id == PID and batch.base_sequence == SEQ
    assert their_records(batch) == expected(1000)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("lib", list(READERS))
def test_log_append_time_seen_by_theirs(lib: str, codec: Compression) -> None:
    buf = bytearray(build_batch(INPUTS, compression=codec))
    set_log_append_time(buf, 0, TS + 5555)
    batch = READERS[lib](bytes(buf))
    assert batch.validate_crc()
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch] == [TS + 5555] * len(INPUTS)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_memory_records_both_ways(codec: Compression) -> None:
    # Their MemoryRecordsBuilder with an offset gap (as left by compaction).
    mb = KpMemoryBuilder(magic=2, compression_type=int(codec), batch_size=1 << 20, offset=0)
    mb.append(TS, b"a", b"x" * 200)
    mb.skip(3)
    mb.append(TS + 1, b"b", b"y" * 200)
    mb.close()
    ours = validate_batch(bytes(mb.buffer()))
    assert [r.offset for r in ours.records()] == [0, 4]
    assert ours.last_offset_delta == 4

    # Several of our batches in one buffer, read with their MemoryRecords.
    buf = b"".join(build_batch(INPUTS, base_offset=i * 10, compression=codec) for i in range(3))
    assert [b.base_offset for b in iter_batches(buf)] == [0, 10, 20]
    for reader in (KpMemoryRecords, AioMemoryRecords):
        mr = reader(buf)
        seen: list[int] = []
        while (batch := mr.next_batch()) is not None:
            assert batch.validate_crc()
            seen.extend(r.offset for r in batch)
        assert seen == [b + i for b in (0, 10, 20) for i in range(len(INPUTS))]


@pytest.mark.parametrize("lib", list(READERS))
def test_offset_gaps_read_by_theirs(lib: str) -> None:
    recs = [RecordInput(b"a", b"1", (), TS, 0), RecordInput(b"b", b"2", (), TS + 1, 6)]
    data = build_batch(recs, base_offset=100, last_offset_delta=9)
    batch = READERS[lib](data)
    assert batch.validate_crc()
    assert [r.offset for r in batch] == [100, 106]
    assert batch.next_offset == 110


def test_worked_example_matches_kafka_python(worked_example: bytes) -> None:
    builder = KpBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=1234,
        producer_epoch=5,
        base_sequence=7,
        batch_size=1 << 20,
    )
    builder.append(0, TS, b"k", b"v", [("h", b"x")])
    builder.append(1, TS + 5, None, b"vv", [])
    assert bytes(builder.build()) == worked_example
    assert RecordBatch(worked_example).is_valid()
