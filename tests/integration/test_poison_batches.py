"""Batches whose CRC is right but whose contents would break every consumer of the partition are
refused at produce time, with Kafka's answers (LogValidator / UnifiedLog.analyzeAndValidateRecords),
and the partition stays readable: a real consumer (librdkafka) reads the good batches around them."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import crc32c
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import CreateTopicsRequest, CreateTopicsResponse, ProduceRequest, ProduceResponse
from pybroker.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    Compression,
)
from pybroker.records.compression import compress
from pybroker.records.record import RecordInput, build_batch, encode_record, now_ms
from pybroker.records.varint import encode_varint
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

PartitionAnswer = ProduceResponse.PartitionProduceResponse


def raw_batch(records: bytes, count: int, *, last_offset_delta: int | None = None, attributes: int = 0,
              base_offset: int = 0, base_timestamp: int | None = None, max_timestamp: int | None = None,
              producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A v2 batch around an arbitrary records section, header fields as given, with a valid CRC."""
    ts = now_ms() if base_timestamp is None else base_timestamp
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    buf = bytearray(RECORD_BATCH_OVERHEAD + len(records))
    BATCH_HEADER.pack_into(buf, 0, base_offset, len(buf) - LOG_OVERHEAD, -1, 2, 0, attributes, delta, ts,
                           ts if max_timestamp is None else max_timestamp, producer_id, producer_epoch,
                           base_sequence, count)
    buf[RECORD_BATCH_OVERHEAD:] = records
    buf[CRC_OFFSET:CRC_OFFSET + 4] = crc32c.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    return bytes(buf)


def records_of(*bodies: tuple[int, int, bytes | None, bytes | None]) -> bytes:
    """A records section: (offset_delta, timestamp_delta, key, value) per record."""
    out = bytearray()
    for offset_delta, ts_delta, key, value in bodies:
        encode_record(out, offset_delta, ts_delta, key, value)
    return bytes(out)


GOOD = records_of((0, 0, b"k0", b"v0"), (1, 0, b"k1", b"v1"), (2, 0, b"k2", b"v2"))


def header_with_negative_key_size() -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += encode_varint(0) + encode_varint(0)  # timestamp delta, offset delta
    body += encode_varint(1) + b"k" + encode_varint(1) + b"v"
    body += encode_varint(1) + encode_varint(-5)  # one header whose key size is -5
    return encode_varint(len(body)) + bytes(body)


def gzip_bomb() -> bytes:
    """1 GiB of zeros, gzipped into a batch just under the default max.message.bytes (~1 MB)."""
    c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1 << 20)
    payload = b"".join(c.compress(chunk) for _ in range(1024)) + c.flush()
    return raw_batch(payload, 3, attributes=Compression.GZIP)


@dataclass(frozen=True)
class Case:
    name: str
    batch: bytes | Callable[[], bytes]  # a callable for what is slow to build
    code: ErrorCode
    configs: tuple[tuple[str, str], ...] = ()
    transactional_id: str | None = None
    message: str | None = None  # a substring of the answer's error_message
    record_errors: tuple[int, ...] = ()


NOW = now_ms()
CASES = [
    *(Case(f"garbage-{codec.name.lower()}", raw_batch(b"this is not compressed data at all" * 4, 3,
                                                      attributes=codec), ErrorCode.CORRUPT_MESSAGE)
      for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)),
    Case("lz4-valid-frame-garbage-records", raw_batch(compress(Compression.LZ4, b"\x7f" * 300), 3,
                                                      attributes=Compression.LZ4), ErrorCode.INVALID_RECORD),
    Case("negative-header-key-size", raw_batch(header_with_negative_key_size(), 1), ErrorCode.INVALID_RECORD,
         message="Invalid negative header key size -5"),
    Case("record-runs-past-batch", raw_batch(encode_varint(500) + b"\x00\x00\x00", 1), ErrorCode.INVALID_RECORD),
    Case("declares-1000-holds-3", raw_batch(GOOD, 1000), ErrorCode.INVALID_RECORD,
         message="Incorrect declared batch size"),
    Case("count-disagrees-with-delta", raw_batch(GOOD, 3, last_offset_delta=5), ErrorCode.INVALID_RECORD,
         message="Inconsistent batch offset range [0, 5] and count of records 3"),
    Case("zero-records", raw_batch(b"", 0, last_offset_delta=0), ErrorCode.INVALID_RECORD,
         message="Invalid reported count for record batch: 0"),
    Case("offset-delta-int-max", raw_batch(records_of((0, 0, b"k", b"v")), 1, last_offset_delta=2**31 - 1),
         ErrorCode.INVALID_RECORD, message="Inconsistent batch offset range"),
    Case("inner-offsets-not-0-to-n", raw_batch(records_of((0, 0, b"a", b"a"), (2, 0, b"b", b"b"),
                                                          (1, 0, b"c", b"c")), 3), ErrorCode.INVALID_RECORD),
    Case("base-offset-not-0", raw_batch(GOOD, 3, base_offset=7), ErrorCode.INVALID_RECORD,
         message="should be 0, but it is 7"),
    Case("gzip-bomb", gzip_bomb, ErrorCode.MESSAGE_TOO_LARGE),
    Case("timestamp-too-old", raw_batch(records_of((0, 0, b"a", b"a"), (1, 10, b"b", b"b")), 2,
                                        base_timestamp=NOW - 7_200_000),
         ErrorCode.INVALID_TIMESTAMP, configs=(("message.timestamp.before.max.ms", "3600000"),),
         message="One or more records have been rejected due to invalid timestamp", record_errors=(0, 1)),
    Case("timestamp-in-the-future", raw_batch(records_of((0, 0, b"a", b"a"), (1, 7_200_000, b"b", b"b")), 2,
                                              base_timestamp=NOW),
         ErrorCode.INVALID_TIMESTAMP, configs=(("message.timestamp.after.max.ms", "3600000"),),
         record_errors=(1,)),
    Case("timestamp-difference-max", raw_batch(GOOD, 3, base_timestamp=NOW - 7_200_000),
         ErrorCode.INVALID_TIMESTAMP, configs=(("message.timestamp.difference.max.ms", "3600000"),),
         record_errors=(0, 1, 2)),
    Case("producer-sets-log-append-time", raw_batch(GOOD, 3, attributes=TIMESTAMP_TYPE_MASK),
         ErrorCode.INVALID_TIMESTAMP, configs=(("message.timestamp.type", "LogAppendTime"),),
         record_errors=(0, 1, 2)),
    Case("control-batch", raw_batch(GOOD, 3, attributes=CONTROL_FLAG_MASK, producer_id=5, producer_epoch=0,
                                    base_sequence=0), ErrorCode.INVALID_RECORD,
         message="Clients are not allowed to write control records"),
    Case("idempotent-negative-sequence", raw_batch(GOOD, 3, producer_id=5, producer_epoch=0, base_sequence=-3),
         ErrorCode.INVALID_RECORD, message="Invalid sequence number -3 in record batch with producerId 5"),
    Case("transactional-without-producer-id", raw_batch(GOOD, 3, attributes=TRANSACTIONAL_FLAG_MASK),
         ErrorCode.INVALID_RECORD, transactional_id="poison-txn"),
    Case("transactional-without-transactional-id",
         raw_batch(GOOD, 3, attributes=TRANSACTIONAL_FLAG_MASK, producer_id=5, producer_epoch=0, base_sequence=0),
         ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
]


def produce(client: WireClient, topic: str, batch: bytes, transactional_id: str | None = None) -> PartitionAnswer:
    request = ProduceRequest(transactional_id=transactional_id, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    return client.request(request, 9, ProduceResponse).responses[0].partition_responses[0]


def read_partition(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """Every value in the partition as librdkafka reads it; any error but end-of-partition fails."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "poison", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if (error := msg.error()) is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                if len(values) >= expected:
                    return values
                continue
            value = msg.value()
            assert value is not None, f"a null value at offset {msg.offset()}"
            values.append(value)
    finally:
        consumer.close()
    raise AssertionError(f"timed out with {values}")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_poison_batch_is_refused_and_the_partition_stays_readable(shared_broker: BrokerProcess, case: Case) -> None:
    topic = f"poison-{case.name}"
    client = WireClient(shared_broker.bootstrap)
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in case.configs])]),
        7, CreateTopicsResponse)
    assert created.topics[0].error_code == 0, created.topics[0].error_message
    assert produce(client, topic, build_batch([RecordInput(b"k", b"before")])).error_code == 0

    batch = case.batch() if callable(case.batch) else case.batch
    assert len(batch) <= 1048588
    answer = produce(client, topic, batch, case.transactional_id)
    assert (ErrorCode(answer.error_code), answer.base_offset) == (case.code, -1), answer.error_message
    if case.message is not None:
        assert case.message in (answer.error_message or "")
    assert tuple(e.batch_index for e in answer.record_errors) == case.record_errors

    assert produce(client, topic, build_batch([RecordInput(b"k", b"after")])).error_code == 0
    client.close()
    assert read_partition(shared_broker.bootstrap, topic, 2) == [b"before", b"after"]


def test_timestamp_errors_name_each_record_as_kafka(shared_broker: BrokerProcess) -> None:
    topic = "poison-timestamp-messages"
    client = WireClient(shared_broker.bootstrap)
    client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, configs=[
            CreateTopicsRequest.CreatableTopicConfig(name="message.timestamp.before.max.ms", value="1000"),
            CreateTopicsRequest.CreatableTopicConfig(name="message.timestamp.after.max.ms", value="1000")])]),
        7, CreateTopicsResponse)
    old = now_ms() - 100_000
    answer = produce(client, topic, raw_batch(records_of((0, 0, b"a", b"a"), (1, 99_500, b"b", b"b")), 2,
                                              base_timestamp=old))
    client.close()
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    [error] = answer.record_errors
    assert error.batch_index == 0
    assert error.batch_index_error_message is not None
    assert error.batch_index_error_message.startswith(f"Timestamp {old} of message with offset 0 is out of range. "
                                                      "The timestamp should be within [")
