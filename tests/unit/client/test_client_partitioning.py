"""Key partitioning and the consumer embedded protocol, without a broker."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pybroker.client.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from pybroker.client.fetcher import decode_partition
from pybroker.client.producer import murmur2, parse_acks, partition_for_key
from pybroker.common.topic import TopicPartition
from pybroker.protocol.messages import FetchResponse
from pybroker.records import RecordInput, build_batch, build_end_txn_marker


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    """kafka-python's DefaultPartitioner hashes keys exactly as Java's producer does."""
    assert murmur2(key) & 0x7FFFFFFF == kafka_python_murmur2(key) & 0x7FFFFFFF


def test_partition_for_key_known_values() -> None:
    # Java: Utils.toPositive(Utils.murmur2("".getBytes())) == 275646681
    assert partition_for_key(b"", 1000) == 275646681 % 1000
    assert all(0 <= partition_for_key(bytes([i]), 7) < 7 for i in range(256))


def test_parse_acks() -> None:
    assert [parse_acks(a) for a in ("all", "-1", "1", "0", " ALL ")] == [-1, -1, 1, 0, -1]


def test_subscription_and_assignment_round_trip() -> None:
    assert decode_subscription(encode_subscription(["b", "a"])) == ["a", "b"]
    partitions = [TopicPartition("a", 1), TopicPartition("a", 0), TopicPartition("b", 2)]
    assert decode_assignment(encode_assignment(partitions)) == \
        [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 2)]
    assert decode_assignment(b"") == []


def test_range_assignor_gives_the_first_members_the_extra_partitions() -> None:
    assigned = range_assign({"m2": ["t"], "m1": ["t", "u"], "m3": ["t"]}, {"t": 7, "u": 2})
    assert assigned == {
        "m1": [TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2),
               TopicPartition("u", 0), TopicPartition("u", 1)],
        "m2": [TopicPartition("t", 3), TopicPartition("t", 4)],
        "m3": [TopicPartition("t", 5), TopicPartition("t", 6)],
    }


def test_fetched_records_start_at_the_fetch_offset_and_skip_aborted_transactions() -> None:
    tp = TopicPartition("t", 0)
    plain = build_batch([RecordInput(b"k", b"v0"), RecordInput(None, b"v1")], base_offset=0)
    aborted = build_batch([RecordInput(None, b"gone")], base_offset=2, producer_id=7, producer_epoch=0,
                          is_transactional=True)
    marker = build_end_txn_marker(False, coordinator_epoch=0, base_offset=3, producer_id=7,
                                  producer_epoch=0)
    after = build_batch([RecordInput(None, b"v4")], base_offset=4)
    data = FetchResponse.PartitionData(
        partition_index=0, high_watermark=5, records=plain + aborted + marker + after,
        aborted_transactions=[FetchResponse.AbortedTransaction(producer_id=7, first_offset=2)])
    fetched = decode_partition(tp, 1, data)
    assert [(r.offset, r.value) for r in fetched.records] == [(1, b"v1"), (4, b"v4")]
    assert fetched.next_offset == 5
