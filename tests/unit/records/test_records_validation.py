"""Produce validation (LogValidator's checks) on batches built by real client libraries and on
hand-made poison, and the bounded decompression that keeps a compression bomb from inflating.
Every test runs twice: records walked in Python, and vectorized (record_scan) from one record on."""

from __future__ import annotations

import time
import tracemalloc
import zlib

import lz4.frame
import pytest
import snappy
from kafka.record.default_records import DefaultRecordBatchBuilder

from pybroker.records import Compression, CorruptRecordError, RecordTooLargeError, decompress, validation
from pybroker.records.batch import RecordBatch, validate_batch
from pybroker.records.errors import InvalidRecordError, RecordValidationError
from pybroker.records.record import RecordInput, build_batch, encode_record, now_ms
from pybroker.records.validation import ProducePolicy, max_decompressed_bytes, validate_produced_batch
from tests.integration.test_poison_batches import raw_batch

NOW = 1_700_000_000_000
TP = "t-0"


@pytest.fixture(autouse=True, params=["python walk", "vectorized walk"])
def record_walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(validation, "MIN_RECORDS", 10**9 if request.param == "python walk" else 1)
    return str(request.param)


FRAME_BEFORE = b"\xff" * 7
FRAME_AFTER = b"\x00" * 64  # would read as more fields of a truncated last record


def check(batch: bytes, policy: ProducePolicy = ProducePolicy(), now: int = NOW) -> int:
    """The batch as the broker holds it: a view of the request frame, whose bytes after the batch are no part of
    its records (the interpreted walks read the view in place; a read past the batch's end must fail as before)."""
    frame = memoryview(FRAME_BEFORE + batch + FRAME_AFTER)
    return validate_produced_batch(validate_batch(frame, len(FRAME_BEFORE), check_counts=False), policy, now, TP)


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_batches_pass_and_max_timestamp_is_the_records(codec: Compression) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(50):
        headers = [("h", b"x" * 200)] if i % 7 == 0 else []
        builder.append(i, timestamp=NOW + i * 1000, key=None if i % 5 == 0 else b"k%d" % i,
                       value=b"v" * (i * 40), headers=headers)
    assert check(bytes(builder.build())) == NOW + 49_000


def test_a_producer_claimed_max_timestamp_is_not_trusted() -> None:
    body = bytearray()
    encode_record(body, 0, 0, b"k", b"v")
    assert check(raw_batch(bytes(body), 1, base_timestamp=NOW, max_timestamp=2**62)) == NOW


@pytest.mark.parametrize("body, message", [
    (b"\x02\x00", "Found invalid record structure"),  # a record whose payload is cut short
    (b"\x14\x00", "Invalid record size: expected 10 bytes in record payload, but instead the buffer has only 1"),
    (b"\x0c\x00\x00\x00\x02k\x02v", "Found invalid record structure"),  # header count missing
    (b"\x0e\x00\x00\x00\x02k\x02v\x01", "Found invalid number of record headers -1"),
    (b"\x0e\x00\x00\x00\x03k\x02v\x00", "Invalid negative key size -2"),
    (b"\x12\x00\x00\x00\x02k\x02v\x00\x00", "Invalid record size: expected to read 9 bytes in record payload, "
                                               "but instead read 8"),
])
def test_malformed_records_are_invalid_record(body: bytes, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        check(raw_batch(body, 1))


def test_bytes_after_the_declared_records_are_refused() -> None:
    body = bytearray()
    encode_record(body, 0, 0, b"k", b"v")
    encode_record(body, 1, 0, b"k", b"v")
    with pytest.raises(InvalidRecordError, match="records still remaining"):
        check(raw_batch(bytes(body), 1))


def test_keyless_and_timestamp_errors_are_named_like_kafka() -> None:
    records = [RecordInput(None, b"v", timestamp=NOW), RecordInput(b"k", b"v", timestamp=NOW - 10_000),
               RecordInput(b"k", b"v", timestamp=NOW)]
    policy = ProducePolicy(compacted=True, timestamp_before_max_ms=5000)
    with pytest.raises(RecordValidationError) as info:
        check(build_batch(records), policy)
    assert info.value.invalid_timestamp
    assert info.value.record_errors == [
        (0, f"Compacted topic cannot accept message without key in topic partition {TP}"),
        (1, f"Timestamp {NOW - 10_000} of message with offset 1 is out of range. The timestamp should be within "
            f"[{NOW - 5000}, {NOW + 2**63 - 1 - 2**64}]")]  # Java's long wraps, Kafka prints it so
    assert str(info.value) == "One or more records have been rejected due to invalid timestamp"


def test_records_without_timestamp_are_not_range_checked() -> None:
    body = bytearray()
    encode_record(body, 0, 0, b"k", b"v")
    policy = ProducePolicy(timestamp_before_max_ms=0, timestamp_after_max_ms=0)
    assert check(raw_batch(bytes(body), 1, base_timestamp=-1), policy) == -1


def gigabyte_of_zeros(codec: Compression) -> bytes:
    """1 GiB of zeros compressed by ``codec`` into a few MB, written 1 MiB at a time."""
    chunk = bytes(1 << 20)
    if codec == Compression.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return b"".join(c.compress(chunk) for _ in range(1024)) + c.flush()
    frames = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    return frames.begin() + b"".join(frames.compress(chunk) for _ in range(1024)) + frames.flush()


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4])
def test_a_bomb_stops_at_the_limit_without_inflating_it_all(codec: Compression) -> None:
    bomb = gigabyte_of_zeros(codec)
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError):
            check(raw_batch(bomb, 3, attributes=codec),
                  ProducePolicy(max_decompressed_bytes=max_decompressed_bytes(1048588)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * max_decompressed_bytes(1048588)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_every_codec_stops_at_the_limit(codec: Compression) -> None:
    payload = bytes(4 << 20)
    compressed = build_batch([RecordInput(b"k", payload)], compression=codec)
    with pytest.raises(RecordTooLargeError):
        check(compressed, ProducePolicy(max_decompressed_bytes=1 << 20))
    assert check(compressed, ProducePolicy(max_decompressed_bytes=8 << 20)) > 0


def test_raw_snappy_declaring_a_huge_length_is_refused_before_allocating() -> None:
    declared = b"\xff\xff\xff\xff\x0f" + snappy.compress(b"x" * 100)[1:]  # preamble says 4 GiB
    started = time.monotonic()
    with pytest.raises(RecordTooLargeError):
        decompress(Compression.SNAPPY, declared, max_size=64 << 20)
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_undecompressable_payload_is_corrupt(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError) as info:
        check(raw_batch(b"not compressed at all, not at all" * 3, 1, attributes=codec))
    assert not isinstance(info.value, InvalidRecordError)


def test_batch_header_rules() -> None:
    body = bytearray()
    encode_record(body, 0, 0, b"k", b"v")
    with pytest.raises(InvalidRecordError, match="Batch has an invalid offset range"):
        check(raw_batch(bytes(body), 1, last_offset_delta=-1))
    with pytest.raises(InvalidRecordError, match="Invalid reported count for record batch: -4"):
        check(raw_batch(bytes(body), -4, last_offset_delta=0))
    assert RecordBatch(raw_batch(bytes(body), 1)).records_count == 1


def test_good_path_builds_no_record_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    import pybroker.records.record as record_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Record built on the good path")

    monkeypatch.setattr(record_module.Record, "__init__", refuse)
    batch = build_batch([RecordInput(b"k%d" % i, b"v" * i, timestamp=now_ms()) for i in range(100)])
    check(batch, ProducePolicy(compacted=True, timestamp_before_max_ms=60_000, timestamp_after_max_ms=60_000),
          now_ms())
