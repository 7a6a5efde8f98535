"""Client framing: request frames the server can parse, responses matched by correlation id."""

from __future__ import annotations

import pytest

from pybroker.client.wire import ClientWire
from pybroker.protocol.errors import DecodeError
from pybroker.protocol.frame import decode_request_header, encode_response
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse


def metadata_response(correlation_id: int, version: int, cluster_id: str) -> bytes:
    body = MetadataResponse(cluster_id=cluster_id, controller_id=0).encode(version)
    return encode_response(correlation_id, MetadataRequest.API_KEY, version, body)


def test_request_frame_carries_header_and_body_at_the_chosen_version() -> None:
    wire = ClientWire("tool")
    correlation_id, frame = wire.encode_request(MetadataRequest(topics=None), 12)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, offset = decode_request_header(frame[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == \
           (3, 12, correlation_id, "tool")
    assert MetadataRequest.decode(frame[4 + offset:], 12).topics is None


def test_responses_are_matched_by_correlation_id_even_out_of_order() -> None:
    wire = ClientWire("tool")
    first, _ = wire.encode_request(MetadataRequest(), 12)
    second, _ = wire.encode_request(MetadataRequest(), 1)
    responses = wire.receive(metadata_response(second, 1, "b") + metadata_response(first, 12, "a"))
    assert [(r.correlation_id, r.api_version, r.message.cluster_id) for r in responses] == \
           [(second, 1, None), (first, 12, "a")]  # cluster_id exists from v2 only
    assert wire.in_flight == 0


def test_a_response_split_across_reads_is_reassembled() -> None:
    wire = ClientWire("tool")
    correlation_id, _ = wire.encode_request(MetadataRequest(), 9)
    data = metadata_response(correlation_id, 9, "cluster")
    assert wire.receive(data[:3]) == [] and wire.receive(data[3:10]) == []
    [response] = wire.receive(data[10:])
    assert response.message.cluster_id == "cluster"


def test_late_answer_to_an_abandoned_request_is_dropped() -> None:
    wire = ClientWire("tool")
    timed_out, _ = wire.encode_request(MetadataRequest(), 12)
    wire.abandon(timed_out)
    current, _ = wire.encode_request(MetadataRequest(), 12)
    [response] = wire.receive(metadata_response(timed_out, 12, "late") + metadata_response(current, 12, "now"))
    assert (response.correlation_id, response.message.cluster_id) == (current, "now")


def test_unknown_correlation_id_is_a_decode_error() -> None:
    wire = ClientWire("tool")
    with pytest.raises(DecodeError, match="unknown correlation id 7"):
        wire.receive(metadata_response(7, 12, "x"))


def test_unsupported_api_versions_answer_is_read_as_v0() -> None:
    """KIP-511: a broker that does not know ApiVersions v3 answers with a v0 body carrying error 35."""
    wire = ClientWire("tool")
    correlation_id, _ = wire.encode_request(ApiVersionsRequest(client_software_name="pybroker"), 3)
    body = ApiVersionsResponse(error_code=35, api_keys=[ApiVersionsResponse.ApiVersion(18, 0, 2)]).encode(0)
    [response] = wire.receive(encode_response(correlation_id, 18, 0, body))
    assert response.api_version == 0
    assert response.message.error_code == 35
    assert [(k.api_key, k.max_version) for k in response.message.api_keys] == [(18, 2)]


def test_a_request_without_response_is_not_waited_for() -> None:
    """Produce with acks=0: the broker never answers, so nothing may stay pending for it."""
    wire = ClientWire("tool")
    wire.encode_request(MetadataRequest(), 12, expect_response=False)
    assert wire.in_flight == 0
    answered, _ = wire.encode_request(MetadataRequest(), 12)
    assert [r.correlation_id for r in wire.receive(metadata_response(answered, 12, "a"))] == [answered]
