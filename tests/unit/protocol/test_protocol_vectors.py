"""Hand-built byte vectors, checked field by field (independent of our encoder)."""

from __future__ import annotations

import uuid

import pytest

from pybroker.protocol.errors import DecodeError, EncodeError
from pybroker.protocol.frame import decode_request_header, encode_request, encode_response
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupHeartbeatResponse,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


def test_api_versions_request_v3_frame() -> None:
    frame = h(
        "0012 0003 00000007 0003 636c69 00"  # header v2: key, version, corr, client "cli", tags
        "09 7079627 26f6b6572"  # compact string "pybroker"
        "06 302e312e30"  # compact string "0.1.0"
        "00"  # tagged fields
    )
    header, offset = decode_request_header(frame)
    assert (header.request_api_key, header.request_api_version) == (18, 3)
    assert header.correlation_id == 7
    assert header.client_id == "cli"
    assert offset == 14
    body = ApiVersionsRequest.decode(frame[offset:], 3)
    assert body.client_software_name == "pybroker"
    assert body.client_software_version == "0.1.0"
    assert body.encode(3) == frame[offset:]
    full = encode_request(RequestHeader(correlation_id=7, client_id="cli"), body, 3)
    assert full == len(frame).to_bytes(4, "big") + frame


def test_api_versions_request_v0_has_empty_body_and_header_v1() -> None:
    frame = h("0012 0000 0000002a ffff")  # null client id
    header, offset = decode_request_header(frame)
    assert header.client_id is None and header.correlation_id == 42
    assert offset == len(frame)
    assert ApiVersionsRequest.decode(b"", 0) == ApiVersionsRequest()


def test_metadata_request_v12_null_topics() -> None:
    body = h("00 01 00 00")  # topics=null, allow_auto=true, include_topic_authz=false, tags
    req = MetadataRequest.decode(body, 12)
    assert req.topics is None
    assert req.allow_auto_topic_creation is True
    assert req.include_topic_authorized_operations is False
    assert req.encode(12) == body
    # v1..8 use int32 -1 for the null array; v0 cannot express null
    assert MetadataRequest(topics=None).encode(1) == h("ffffffff")
    with pytest.raises(EncodeError):
        MetadataRequest(topics=None).encode(0)


def test_metadata_request_v12_topic_id_and_name() -> None:
    tid = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    body = h("02" + tid.hex + "02 74 00" + "00 00 00")  # [ {topic_id, name "t", tags} ]
    req = MetadataRequest.decode(body, 12)
    assert req.topics == [MetadataRequest.MetadataRequestTopic(topic_id=tid, name="t")]
    assert req.allow_auto_topic_creation is False
    assert req.encode(12) == body


def test_produce_request_v9_skips_unknown_tagged_field_and_records_are_zero_copy() -> None:
    body = h(
        "00"  # transactional_id null
        "ffff"  # acks -1
        "00007530"  # timeout 30000
        "02"  # topic_data: 1 element
        "  02 74"  # name "t"
        "  02"  # partition_data: 1 element
        "    00000001"  # index 1
        "    04 616263"  # records (compact bytes) b"abc"
        "    00"  # partition tags
        "  00"  # topic tags
        "01 05 02 abcd"  # top-level tags: unknown tag 5, 2 bytes -> skipped
    )
    req = ProduceRequest.decode(body, 9)
    assert req.transactional_id is None
    assert req.acks == -1 and req.timeout_ms == 30000
    (topic,) = req.topic_data
    assert topic.name == "t"
    (part,) = topic.partition_data
    assert part.index == 1
    assert isinstance(part.records, memoryview)
    assert part.records.obj is body  # a slice of the input, not a copy
    assert bytes(part.records) == b"abc"
    assert req.encode(9) == body[:-5] + b"\x00"  # unknown tags are not re-emitted


def test_produce_request_v3_non_flexible() -> None:
    body = h("0003 747874 0001 00000064 00000001 0001 74 00000001 00000000 00000002 6869")
    req = ProduceRequest.decode(body, 3)
    assert req.transactional_id == "txt" and req.acks == 1 and req.timeout_ms == 100
    assert bytes(req.topic_data[0].partition_data[0].records) == b"hi"
    assert req.encode(3) == body
    # records accept any bytes-like on encode
    part = req.topic_data[0].partition_data[0]
    part.records = bytearray(b"hi")
    assert req.encode(3) == body


def test_produce_response_v10_tagged_fields() -> None:
    body = h(
        "02"  # responses: 1
        "  02 74"  # name "t"
        "  02"  # partition_responses: 1
        "    00000000 0006"  # index 0, error NOT_LEADER_OR_FOLLOWER
        "    ffffffffffffffff ffffffffffffffff ffffffffffffffff"  # base, log_append, log_start
        "    01 00"  # record_errors empty, error_message null
        "    01 00 09 00000002 00000005 00"  # tags: CurrentLeader(tag 0) = {2, 5}
        "  00"  # topic tags
        "00000000"  # throttle
        "01 00 0d 02 00000002 0268 00002384 00 00"  # tags: NodeEndpoints(tag 0)
    )
    resp = ProduceResponse.decode(body, 10)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 6 and part.base_offset == -1
    assert part.current_leader == ProduceResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=5)
    assert resp.node_endpoints == [ProduceResponse.NodeEndpoint(node_id=2, host="h", port=9092)]
    assert resp.encode(10) == body
    # default-valued tagged fields are omitted entirely
    part.current_leader = ProduceResponse.LeaderIdAndEpoch()
    resp.node_endpoints = []
    short = resp.encode(10)
    assert short.endswith(h("00 00 00000000 00"))
    # v9 has no tagged fields at all
    assert ProduceResponse.decode(resp.encode(9), 9).responses == resp.responses


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    body = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(18, 0, 4)]).encode(3)
    frame = encode_response(99, 18, 3, body)
    assert frame[:8] == (4 + len(body)).to_bytes(4, "big") + h("00000063")
    assert frame[8:] == body
    # a flexible response of another API gets header v1 (empty tag section)
    frame = encode_response(5, 3, 12, b"xy")
    assert frame == h("00000007 00000005 00") + b"xy"
    assert encode_response(5, 3, 8, b"xy") == h("00000006 00000005") + b"xy"


def test_nullable_struct_field() -> None:
    cls = ConsumerGroupHeartbeatResponse
    resp = cls(member_id="m", assignment=None)
    data = resp.encode(0)
    assert cls.decode(data, 0).assignment is None
    resp.assignment = cls.Assignment(topic_partitions=[cls.TopicPartitions(uuid.UUID(int=1), [0])])
    data2 = resp.encode(0)
    assert len(data2) > len(data)
    assert cls.decode(data2, 0) == resp
    # -1 prefix (null) vs 1 (present) right before the struct
    assert data.endswith(h("ff 00"))


def test_fetch_request_v4_and_decode_errors() -> None:
    req = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1024,
                       isolation_level=1,
                       topics=[FetchRequest.FetchTopic(topic="t", partitions=[
                           FetchRequest.FetchPartition(partition=0, fetch_offset=5,
                                                       partition_max_bytes=100)])])
    data = req.encode(4)
    assert FetchRequest.decode(data, 4) == req
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            FetchRequest.decode(data[:cut], 4)
    with pytest.raises(DecodeError) as exc:
        FetchRequest.decode(data, 99)
    assert exc.value.error_code == 35


def test_absurd_array_length_is_rejected_without_allocating() -> None:
    with pytest.raises(DecodeError):
        MetadataRequest.decode(h("7fffffff"), 1)
    with pytest.raises(DecodeError):
        MetadataRequest.decode(h("ffffffff0f 00 00 00"), 12)


def test_non_nullable_null_is_rejected() -> None:
    with pytest.raises(DecodeError):
        ProduceRequest.decode(h("ffff 0001 00000064 00000001 ffff"), 3)  # topic name null
    with pytest.raises(EncodeError, match="name"):
        ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name=None)]).encode(3)  # type: ignore[arg-type]


def test_tagged_value_cannot_read_past_its_size() -> None:
    # ProduceResponse v10, top-level tag 0 (NodeEndpoints) claims 2 bytes but needs more
    body = bytes.fromhex("01 00000000 01 00 02 0200".replace(" ", "")) + b"\x00" * 20
    with pytest.raises(DecodeError):
        ProduceResponse.decode(body, 10)
