"""FrameDecoder and header-version rules."""

from __future__ import annotations

import random
import struct

import pytest

from pybroker.protocol.api_keys import REQUEST_VERSIONS
from pybroker.protocol.errors import DecodeError, FrameTooLarge
from pybroker.protocol.frame import (
    FrameDecoder,
    decode_request_header,
    decode_request_header_fields,
    decode_response_header,
    encode_request,
    encode_response,
    encode_response_message,
    request_header_version,
    response_header_version,
)
from pybroker.protocol.messages import (
    ApiVersionsResponse,
    FetchResponse,
    MetadataRequest,
    ProduceRequest,
    RequestHeader,
)
from pybroker.protocol.primitives import Reader, Writer


def framed(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def test_many_frames_in_one_feed() -> None:
    payloads = [bytes([i]) * i for i in range(50)]
    dec = FrameDecoder(1024)
    out = dec.feed(framed(*payloads))
    assert [bytes(f) for f in out] == payloads
    assert dec.buffered == 0


@pytest.mark.parametrize("seed", range(20))
def test_partial_feeds_in_random_chunks(seed: int) -> None:
    rnd = random.Random(seed)
    payloads = [rnd.randbytes(rnd.randint(0, 300)) for _ in range(30)]
    stream = framed(*payloads)
    dec = FrameDecoder(1024)
    got: list[bytes] = []
    views = []
    pos = 0
    while pos < len(stream):
        n = rnd.randint(1, 64)
        chunk = bytearray(stream[pos : pos + n])  # mutable chunk, reused by the caller below
        frames = dec.feed(chunk)
        chunk[:] = b"\x00" * len(chunk)
        views += frames
        got += [bytes(f) for f in frames]
        pos += n
    assert got == payloads
    assert [bytes(v) for v in views] == payloads  # earlier views are never overwritten
    assert dec.buffered == 0


def test_byte_at_a_time() -> None:
    stream = framed(b"hello", b"", b"world")
    dec = FrameDecoder(100)
    out = [bytes(f) for i in range(len(stream)) for f in dec.feed(stream[i : i + 1])]
    assert out == [b"hello", b"", b"world"]


def test_oversized_length_rejected_before_buffering() -> None:
    dec = FrameDecoder(1000)
    with pytest.raises(FrameTooLarge) as exc:
        dec.feed(struct.pack(">i", 1001) + b"x" * 10)
    assert exc.value.size == 1001 and exc.value.max_size == 1000
    assert dec.buffered == 0
    # also when the size prefix itself arrives in pieces
    dec = FrameDecoder(1000)
    assert dec.feed(b"\x7f\xff") == []
    with pytest.raises(FrameTooLarge):
        dec.feed(b"\xff\xff")
    assert dec.buffered == 0


def test_exactly_max_size_is_accepted() -> None:
    dec = FrameDecoder(8)
    assert [bytes(f) for f in dec.feed(framed(b"12345678"))] == [b"12345678"]


def test_negative_length() -> None:
    with pytest.raises(DecodeError):
        FrameDecoder(100).feed(struct.pack(">i", -1))


def test_complete_frames_are_zero_copy_slices_of_the_input() -> None:
    data = framed(b"abc", b"defg")
    frames = FrameDecoder(100).feed(data)
    assert all(f.obj is data for f in frames)


def test_large_frame_in_many_chunks_is_linear() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = framed(payload)
    dec = FrameDecoder(2 << 20)
    out = []
    for i in range(0, len(stream), 1000):
        out += dec.feed(stream[i : i + 1000])
    assert len(out) == 1 and out[0] == payload


def test_header_versions() -> None:
    assert request_header_version(0, 8) == 1 and request_header_version(0, 9) == 2
    assert request_header_version(7, 0) == 0 and request_header_version(7, 1) == 1
    assert request_header_version(18, 3) == 2 and request_header_version(17, 1) == 1
    assert response_header_version(18, 3) == 0 and response_header_version(18, 4) == 0
    assert response_header_version(3, 9) == 1 and response_header_version(3, 8) == 0
    assert response_header_version(1, 12) == 1 and response_header_version(17, 1) == 0


def test_unknown_key_and_version_parse_as_header_v1() -> None:
    # ApiVersions v9 (future) sent with a v2 header: parse key/version/corr/client id only
    frame = bytes.fromhex("0012 0009 00000005 0002 6964 00 05 aa".replace(" ", ""))
    header, offset = decode_request_header(frame)
    assert (header.request_api_key, header.request_api_version) == (18, 9)
    assert header.correlation_id == 5 and header.client_id == "id"
    assert offset == 12
    frame = bytes.fromhex("03e7 0000 00000006 ffff".replace(" ", ""))  # api key 999
    header, offset = decode_request_header(frame)
    assert header.request_api_key == 999 and header.correlation_id == 6 and offset == 10
    with pytest.raises(DecodeError):
        decode_request_header(b"\x00\x12\x00")


def test_request_roundtrip_through_decoder() -> None:
    req = ProduceRequest(acks=1, timeout_ms=5, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[ProduceRequest.PartitionProduceData(0, b"rec")])])
    frames = FrameDecoder(1 << 20).feed(
        encode_request(RequestHeader(correlation_id=1, client_id="c"), req, 9)
        + encode_request(RequestHeader(correlation_id=2, client_id=None), MetadataRequest(), 4))
    header, off = decode_request_header(frames[0])
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (0, 9, 1)
    assert ProduceRequest.decode(frames[0][off:], 9) == req
    header, off = decode_request_header(frames[1])
    assert (header.request_api_key, header.client_id) == (3, None)
    assert MetadataRequest.decode(frames[1][off:], 4) == MetadataRequest()


def test_response_header_decode() -> None:
    frame = encode_response(77, 3, 12, b"body")
    (payload,) = FrameDecoder(100).feed(frame)
    header, off = decode_response_header(payload, 3, 12)
    assert header.correlation_id == 77 and bytes(payload[off:]) == b"body"


@pytest.mark.parametrize("api_key,msg,version", [
    (18, ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(0, 0, 11)]), 3),
    (18, ApiVersionsResponse(), 0),
    (1, FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[
        FetchResponse.PartitionData(partition_index=0, records=b"r" * 1000)])]), 11),
    (1, FetchResponse(), 12),
])
def test_encode_response_message_matches_encode_response(api_key: int, msg: object,
                                                         version: int) -> None:
    expected = encode_response(9, api_key, version, msg.encode(version))  # type: ignore[attr-defined]
    assert bytes(encode_response_message(9, api_key, version, msg)) == expected  # type: ignore[arg-type]


def _generic_header(frame: bytes) -> tuple[RequestHeader, int]:
    """What the generated RequestHeader codec reads, the reference for the one-unpack path."""
    key, version = struct.unpack_from(">hh", frame)
    r = Reader(frame)
    return RequestHeader.read(r, request_header_version(key, version)), r.pos


@pytest.mark.parametrize("key,version", [(key, version) for key, (low, high) in REQUEST_VERSIONS.items()
                                         for version in {low, high}])
@pytest.mark.parametrize("client_id", ["rdkafka", None, "", "клиент-é"])
def test_usual_header_reads_as_the_codec_does(key: int, version: int, client_id: str | None) -> None:
    header = RequestHeader(request_api_key=key, request_api_version=version, correlation_id=-7, client_id=client_id)
    w = Writer()
    header.write(w, request_header_version(key, version))
    frame = w.getvalue() + b"body"
    assert decode_request_header(frame) == _generic_header(frame)
    generic, offset = _generic_header(frame)
    assert decode_request_header_fields(frame) == (key, version, -7, generic.client_id, offset)


def test_header_fields_of_any_header_are_the_codecs() -> None:
    """The dispatcher's reading: the same fields as the header, for a header the one-unpack path leaves to the
    codec (tagged fields) and for an unknown API key (read as a v1 header)."""
    tagged = bytes.fromhex("0001 000c 00000009 0001 63 01 00 01 ff".replace(" ", ""))
    unknown = bytes.fromhex("7fff 0003 00000004 0002 6964".replace(" ", "")) + b"body"
    for frame in (tagged, unknown):
        header, offset = decode_request_header(frame)
        assert decode_request_header_fields(frame) == (header.request_api_key, header.request_api_version,
                                                       header.correlation_id, header.client_id, offset)
    assert decode_request_header_fields(unknown) == (0x7FFF, 3, 4, "id", 12)


def test_header_with_tagged_fields_or_bad_client_id_goes_through_the_codec() -> None:
    tagged = bytes.fromhex("0001 000c 00000009 0001 63 01 00 01 ff".replace(" ", ""))  # Fetch v12, one tagged field
    header, offset = decode_request_header(tagged)
    assert header.client_id == "c" and offset == 15
    with pytest.raises(DecodeError):  # client id longer than the frame
        decode_request_header(bytes.fromhex("0001 000c 00000009 0005 6364".replace(" ", "")))
    with pytest.raises(DecodeError):  # client id of invalid UTF-8
        decode_request_header(bytes.fromhex("0001 000c 00000009 0001 ff 00".replace(" ", "")))
    with pytest.raises(DecodeError):  # a v2 header cut before its tagged fields
        decode_request_header(bytes.fromhex("0001 000c 00000009 0001 63".replace(" ", "")))
