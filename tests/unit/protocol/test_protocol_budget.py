"""A request's arrays may not decode into more Python objects than schema.DECODE_BUDGET allows (estimated bytes),
however many elements the frame's bytes could hold; responses and internal data are not bounded this way."""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from pybroker.protocol.errors import DecodeError
from pybroker.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    OffsetFetchRequest,
    UpdateMetadataRequest,
)
from pybroker.protocol.schema import DECODE_BUDGET


def test_a_request_of_millions_of_tiny_elements_is_refused_before_it_is_built() -> None:
    count = 2_000_000  # 4 MB of two-byte topic names "" would be ~220 MB of objects
    body = struct.pack(">i", count) + b"\0\0" * count + b"\0"
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="decode budget"):
            MetadataRequest.decode(body, 4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_an_int32_array_is_charged_per_element() -> None:
    def body(count: int) -> bytes:
        return b"\0\x01g" + struct.pack(">i", 1) + b"\0\x01t" + struct.pack(">i", count) + bytes(4 * count)

    with pytest.raises(DecodeError, match="decode budget"):
        OffsetFetchRequest.decode(body(DECODE_BUDGET // 40 + 1), 1)  # an int object and a list slot each
    assert len(OffsetFetchRequest.decode(body(DECODE_BUDGET // 40 - 100), 1).topics[0].partition_indexes) > 1_000_000


def test_millions_of_unknown_tagged_fields_are_refused() -> None:
    count = 3_000_000
    # Metadata v12: Topics null, AllowAutoTopicCreation, IncludeTopicAuthorizedOperations, then the tagged fields
    body = b"\x00\x00\x00" + _uvarint(count) + b"\x7f\x00" * count
    with pytest.raises(DecodeError, match="tagged fields"):
        MetadataRequest.decode(body, 12)


def test_legitimate_large_requests_fit() -> None:
    topics = [MetadataRequest.MetadataRequestTopic(name=f"topic-{i}") for i in range(50_000)]
    assert len(MetadataRequest.decode(MetadataRequest(topics=topics).encode(12), 12).topics) == 50_000
    states = [UpdateMetadataRequest.UpdateMetadataPartitionState(
        topic_name=f"t{i // 100}", partition_index=i % 100, replicas=[0, 1, 2], isr=[0, 1, 2])
        for i in range(120_000)]  # ~740 estimated bytes each: past DECODE_BUDGET, within the controller's budget
    request = UpdateMetadataRequest(ungrouped_partition_states=states)
    assert len(UpdateMetadataRequest.decode(request.encode(4), 4).ungrouped_partition_states) == 120_000


def test_responses_are_not_bounded_by_the_request_budget() -> None:
    count = DECODE_BUDGET // 100
    topic = struct.pack(">h", 3) + b"\0\x01t" + b"\0" + struct.pack(">i", 0)
    body = struct.pack(">ii", 0, 0) + b"\xff\xff" + struct.pack(">ii", 0, count) + topic * count
    assert len(MetadataResponse.decode(body, 4).topics) == count


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
