"""W2's raw pass: read a topic with bare Fetch v16 requests shaped as librdkafka's, one in flight, nothing
decompressed and nothing decoded past each batch's header.

W2's consume rates are the client's: confluent-kafka decompresses and hands out every message in Python
(0.65-0.9 s of client CPU per million messages of 100 bytes, whichever broker answers), while librdkafka's
fetcher, ahead of the application with W2's queue settings, waits on the broker for 7-91 ms (pybroker) or
20-322 ms (Tansu) of round trips per million, so the rates of both brokers move with the client and the
machine, not with the broker. This pass times what the broker alone takes: the sum of the round trips (request
sent to the last byte of its answer read), and the bytes they carried. The requests are librdkafka's (v16, no
fetch session, `fetch.wait.max.ms` 500, `min.bytes` 1, the partitions in an order that turns by one at each
request, as librdkafka rotates them), with the given response and partition limits.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from dataclasses import dataclass

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response_header, encode_request
from pybroker.protocol.messages import FetchRequest, FetchResponse, MetadataRequest, MetadataResponse
from pybroker.protocol.messages.request_header import RequestHeader

FETCH_VERSION = 16
METADATA_VERSION = 12  # the first to name topics by id both ways
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length (bytes after these 12)
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_BATCH_HEADER_SIZE = 61


@dataclass
class RawRead:
    """The round trips of one raw read of a whole topic."""

    fetches: int
    bytes: int  # response frames, size prefixes left out
    seconds: float  # the round trips summed
    round_trips: list[float]


def read_topic(bootstrap: str, topic: str, partitions: int, *, max_bytes: int, partition_max_bytes: int,
               timeout: float) -> RawRead:
    """Read `topic` from offset 0 of every partition to its high watermark, one Fetch in flight."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        topic_id = _topic_id(conn, topic)
        offsets = [0] * partitions
        ends: list[int | None] = [None] * partitions  # each partition's high watermark, once an answer said it
        first = 0
        read = RawRead(0, 0, 0.0, [])
        deadline = time.monotonic() + timeout
        while any(_unfinished(offsets, ends, p) for p in range(partitions)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"raw read of {topic} not done in {timeout:.0f} s: at {offsets} of {ends}")
            order = [(first + i) % partitions for i in range(partitions)]
            first = (first + 1) % partitions
            request = FetchRequest(
                replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                    FetchRequest.FetchPartition(partition=p, fetch_offset=offsets[p], log_start_offset=-1,
                                                partition_max_bytes=partition_max_bytes)
                    for p in order if _unfinished(offsets, ends, p)])])
            frame = _frame(ApiKey.FETCH, FETCH_VERSION, request, read.fetches)
            started = time.perf_counter()
            answer = _exchange(conn, frame)
            read.round_trips.append(time.perf_counter() - started)
            read.fetches += 1
            read.bytes += len(answer)
            _, at = decode_response_header(answer, ApiKey.FETCH, FETCH_VERSION)
            response = FetchResponse.decode(memoryview(answer)[at:], FETCH_VERSION)
            if response.error_code:
                raise RuntimeError(f"Fetch answered error {response.error_code}")
            for answered in response.responses:
                for data in answered.partitions:
                    if data.error_code:
                        raise RuntimeError(f"Fetch of partition {data.partition_index}: error {data.error_code}")
                    ends[data.partition_index] = data.high_watermark
                    records = data.records  # bytes as decoded (file ranges exist on the broker's side only)
                    if isinstance(records, (bytes, bytearray, memoryview)) and records:
                        offsets[data.partition_index] = _after_whole_batches(bytes(records),
                                                                             offsets[data.partition_index])
        read.seconds = sum(read.round_trips)
        return read


def _unfinished(offsets: list[int], ends: list[int | None], partition: int) -> bool:
    """The partition is not read to its high watermark yet (or no answer has said its high watermark)."""
    end = ends[partition]
    return end is None or offsets[partition] < end


def _after_whole_batches(records: bytes, offset: int) -> int:
    """The offset after the last whole batch of `records` (a broker may end an answer with a partial one)."""
    position = 0
    while position + _BATCH_HEADER_SIZE <= len(records):
        base, length = _BATCH_HEAD.unpack_from(records, position)
        if position + 12 + length > len(records):
            break
        offset = base + _LAST_OFFSET_DELTA.unpack_from(records, position + _LAST_OFFSET_DELTA_AT)[0] + 1
        position += 12 + length
    return offset


def _topic_id(conn: socket.socket, topic: str) -> uuid.UUID:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
    answer = _exchange(conn, _frame(ApiKey.METADATA, METADATA_VERSION, request, -1))
    _, at = decode_response_header(answer, ApiKey.METADATA, METADATA_VERSION)
    topics = MetadataResponse.decode(memoryview(answer)[at:], METADATA_VERSION).topics
    if not topics or topics[0].error_code:
        raise RuntimeError(f"no metadata for {topic}: {topics}")
    return topics[0].topic_id


def _frame(api_key: int, version: int, request: FetchRequest | MetadataRequest, correlation_id: int) -> bytes:
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                           client_id="rdkafka")
    return encode_request(header, request, version)


def _exchange(conn: socket.socket, frame: bytes) -> bytearray:
    """Send one request; its whole answer after the size prefix."""
    conn.sendall(frame)
    size = bytearray()
    while len(size) < 4:
        size += _received(conn, 4 - len(size))
    answer = bytearray(int.from_bytes(size, "big"))
    view = memoryview(answer)
    got = 0
    while got < len(answer):
        count = conn.recv_into(view[got:])
        if not count:
            raise RuntimeError("the broker closed the connection")
        got += count
    return answer


def _received(conn: socket.socket, at_most: int) -> bytes:
    data = conn.recv(at_most)
    if not data:
        raise RuntimeError("the broker closed the connection")
    return data
