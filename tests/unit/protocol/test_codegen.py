"""The generated codecs (`pybroker.protocol.codegen`) beside what the round-trip, golden and fuzz tests
already check: their fast paths and the edges of those paths."""

from __future__ import annotations

import uuid

import pytest

from pybroker.protocol import primitives
from pybroker.protocol.errors import DecodeError, EncodeError
from pybroker.protocol.messages import ApiVersionsRequest, FetchRequest, FetchResponse
from pybroker.protocol.primitives import ZERO_UUID, Reader


def _fetch(topic: str, topic_id: uuid.UUID) -> FetchRequest:
    return FetchRequest(max_wait_ms=5, min_bytes=1, topics=[FetchRequest.FetchTopic(
        topic=topic, topic_id=topic_id, partitions=[FetchRequest.FetchPartition(
            partition=3, current_leader_epoch=7, fetch_offset=1 << 40, last_fetched_epoch=6, log_start_offset=9,
            partition_max_bytes=1 << 20)])])


@pytest.mark.parametrize("topic", ["", "t", "ü" * 20, "x" * 126, "y" * 127, "z" * 300])
@pytest.mark.parametrize("version", [12, 13, 17])
def test_compact_strings_of_every_length_class_round_trip(topic: str, version: int) -> None:
    """Names under 127 bytes take the inline path, longer ones (multi-byte length) the codec."""
    request = _fetch(topic, uuid.uuid4())
    decoded = FetchRequest.decode(request.encode(version), version)
    assert decoded.topics[0].partitions == request.topics[0].partitions
    if version < 13:
        assert decoded.topics[0].topic == topic
    else:
        assert decoded.topics[0].topic_id == request.topics[0].topic_id


def test_invalid_utf8_in_an_inline_string_is_a_decode_error() -> None:
    data = bytearray(_fetch("ab", ZERO_UUID).encode(12))
    data[data.index(b"ab")] = 0xFF
    with pytest.raises(DecodeError, match="UTF-8"):
        FetchRequest.decode(bytes(data), 12)


def test_a_truncated_run_of_fixed_fields_names_them() -> None:
    data = _fetch("t", ZERO_UUID).encode(12)
    with pytest.raises(DecodeError, match="FetchRequest.replica_id/max_wait_ms/min_bytes"):
        FetchRequest.decode(data[:10], 12)  # inside the request's leading fixed fields


def test_topic_ids_are_shared_and_the_cache_is_bounded() -> None:
    topic_id = uuid.uuid4()
    first = FetchRequest.decode(_fetch("", topic_id).encode(13), 13).topics[0].topic_id
    second = FetchRequest.decode(_fetch("", topic_id).encode(13), 13).topics[0].topic_id
    assert first == topic_id and first is second
    assert primitives.uuid_of(bytes(16)) is ZERO_UUID
    for _ in range(primitives._UUID_CACHE_SIZE + 10):
        primitives.uuid_of(uuid.uuid4().bytes)
    assert len(primitives._UUIDS) <= primitives._UUID_CACHE_SIZE


def test_tagged_fields_are_written_only_when_they_differ_from_their_default() -> None:
    plain = FetchResponse.PartitionData(partition_index=1, records=b"")
    moved = FetchResponse.PartitionData(partition_index=1, records=b"",
                                        current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=4, leader_epoch=9))
    plain_bytes, moved_bytes = (FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[p])]).encode(12) for p in (plain, moved))
    assert len(moved_bytes) > len(plain_bytes)
    decoded = FetchResponse.decode(moved_bytes, 12).responses[0].partitions[0]
    assert decoded.current_leader == FetchResponse.LeaderIdAndEpoch(leader_id=4, leader_epoch=9)
    assert FetchResponse.decode(plain_bytes, 12).responses[0].partitions[0] == plain


def test_an_unencodable_value_names_the_struct_the_fields_and_the_version() -> None:
    with pytest.raises(EncodeError, match=r"FetchPartition\.partition/.*\(v12\)"):
        FetchRequest(topics=[FetchRequest.FetchTopic(topic="t", partitions=[
            FetchRequest.FetchPartition(partition=1 << 40)])]).encode(12)
    with pytest.raises(EncodeError, match="tagged fields"):
        FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[
            FetchResponse.PartitionData(records=b"", current_leader="not a struct")])]).encode(12)  # type: ignore[arg-type]


def test_a_message_without_fields_on_the_wire_encodes_to_nothing() -> None:
    assert ApiVersionsRequest(client_software_name="x").encode(0) == b""
    assert ApiVersionsRequest.decode(b"", 0) == ApiVersionsRequest()


@pytest.mark.parametrize("count", [0, 1, 126, 127, 300])
def test_arrays_of_structs_on_both_sides_of_the_one_byte_count(count: int) -> None:
    """Up to 126 elements the count is one byte and the array is generated inline; past it the array codec."""
    topic = FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(partition=p)
                                                           for p in range(count)])
    decoded = FetchRequest.decode(FetchRequest(topics=[topic]).encode(12), 12)
    assert [p.partition for p in decoded.topics[0].partitions] == list(range(count))


def test_an_inline_array_still_charges_the_decode_budget() -> None:
    data = FetchRequest(topics=[FetchRequest.FetchTopic(topic="t", partitions=[
        FetchRequest.FetchPartition(partition=p) for p in range(100)])]).encode(12)
    assert FetchRequest.read(Reader(data, 0, 1 << 20), 12).topics[0].partitions[99].partition == 99
    with pytest.raises(DecodeError, match="decode budget"):
        FetchRequest.read(Reader(data, 0, 4000), 12)


def test_a_null_compact_array_goes_to_the_array_codec() -> None:
    assert FetchResponse.decode(FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[FetchResponse.PartitionData(records=b"", aborted_transactions=None)])]).encode(12),
        12).responses[0].partitions[0].aborted_transactions is None
    with pytest.raises(EncodeError, match="not nullable"):
        FetchRequest(topics=None).encode(12)  # type: ignore[arg-type]
