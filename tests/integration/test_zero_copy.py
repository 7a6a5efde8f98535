"""Zero-copy fetch: frames spliced from log files are byte-identical to frames built in memory."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path

import pytest
import uvloop

from pybroker.common.io_executor import IoExecutor
from pybroker.log.file_slice import FileSlice, LogFile, cached_pread
from pybroker.protocol.frame import encode_response_message
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.protocol.primitives import FramePart
from pybroker.records.record import RecordInput, build_batch
from pybroker.server.network import KafkaConnection
from tests.eventually import eventually_async
from tests.integration.test_bad_input import WireClient

FETCH_KEY = 1


def test_fetch_frames_from_the_broker_equal_the_in_memory_encoding(shared_broker):
    client = _RecordingClient(shared_broker.bootstrap)
    try:
        created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="zero-copy", num_partitions=2, replication_factor=1)]), 7, CreateTopicsResponse)
        assert created.topics[0].error_code == 0
        batches = [build_batch([RecordInput(b"k%d" % i, bytes([i]) * 3000) for i in range(n)]) for n in (1, 5, 40)]
        for batch in batches:
            produced = client.request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name="zero-copy", partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=batch)])]), 9, ProduceResponse)
            assert produced.responses[0].partition_responses[0].error_code == 0
        for version in (4, 12, 13, 17):  # plain, flexible, topic ids, latest
            topic = FetchRequest.FetchTopic(topic="zero-copy", topic_id=created.topics[0].topic_id, partitions=[
                FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                for p in (0, 1)])
            request = FetchRequest(max_wait_ms=0, min_bytes=0, topics=[topic])
            body = client.request(request, version, FetchResponse)
            partitions = body.responses[0].partitions
            assert [p.error_code for p in partitions] == [0, 0]
            assert len(partitions[0].records) == sum(map(len, batches))
            assert bytes(partitions[1].records) == b""
            plain = encode_response_message(client.correlation, FETCH_KEY, version, body)
            assert bytes(plain[4:]) == client.last_frame
    finally:
        client.close()


class _RecordingClient(WireClient):
    """Keeps the last response frame as it came off the wire (without its size prefix)."""

    last_frame = b""

    def read_frame(self) -> memoryview:
        frame = super().read_frame()
        self.last_frame = bytes(frame)
        return frame


class _ScriptedDispatcher:
    """Answers request frame ``i`` (one byte) with the parts scripted for it, out of order in time."""

    def __init__(self, responses: list[list[FramePart]], io: IoExecutor | None = None):
        self.responses = responses
        self.io = io
        self.answered = 0

    async def dispatch(self, frame: memoryview, peer: str) -> list[FramePart]:
        index = frame[0]
        await asyncio.sleep(0.001 * (len(self.responses) - index))  # later requests finish first
        self.answered += 1
        return self.responses[index]


async def _exchange(responses: list[list[FramePart]], *, zero_copy: bool, io: IoExecutor | None = None,
                    receive_buffer: int | None = None) -> bytes:
    """Pipeline one request per response, read nothing until all are answered, then read all
    (through a client socket of `receive_buffer` bytes, if given, so that the broker's socket fills)."""
    loop = asyncio.get_running_loop()
    dispatcher = _ScriptedDispatcher(responses, io)
    server = await loop.create_server(
        lambda: KafkaConnection(dispatcher, max_frame_size=1024, max_in_flight=100,
                                connections=set(), zero_copy=zero_copy), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sock = socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"".join(struct.pack(">ib", 1, i) for i in range(len(responses))))
    await eventually_async(lambda: dispatcher.answered == len(responses), "every request answered", interval=0.01)
    received = bytearray()
    while chunk := await asyncio.wait_for(reader.read(1 << 20), 10):
        received += chunk
        if len(received) >= sum(_size(part) for parts in responses for part in parts):
            break
    writer.close()
    server.close()
    return bytes(received)


def _size(part: FramePart) -> int:
    return part.size if isinstance(part, FileSlice) else len(part)


@pytest.fixture
def log_file(tmp_path: Path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(range(256)) * (48 * 1024))  # 12 MiB: more than the socket buffers hold
    file = LogFile.open(str(path))
    yield file
    file.close()


@pytest.mark.parametrize("zero_copy", [True, False])
def test_spliced_responses_arrive_complete_and_in_request_order(log_file, zero_copy):
    size = 4 << 20
    responses: list[list[FramePart]] = [
        [b"head-%d" % i, FileSlice(log_file.path, i * size + i, size - 2 * i, log_file), b"tail-%d" % i]
        for i in range(3)]
    expected = b"".join(part if isinstance(part, bytes) else part.read() for parts in responses for part in parts)
    assert uvloop.run(_exchange(responses, zero_copy=zero_copy)) == expected


def test_ranges_out_of_the_page_cache_are_read_off_the_loop_and_arrive_in_order(log_file):
    """Without zero-copy every range is copied through Python: a chunk the page cache does not hold
    goes to the I/O thread (the loop never waits for the disk), and the frames still arrive whole
    and in request order."""
    evict_from_page_cache(log_file.path)
    size = 4 << 20
    responses: list[list[FramePart]] = [
        [b"head-%d" % i, FileSlice(log_file.path, i * size + i, size - 2 * i, log_file), b"tail-%d" % i]
        for i in range(3)]
    io = IoExecutor(1)
    try:
        received = uvloop.run(_exchange(responses, zero_copy=False, io=io))
    finally:
        io.shutdown()
    expected = b"".join(part if isinstance(part, bytes) else part.read() for parts in responses for part in parts)
    assert received == expected
    assert io.cold_reads["response"] >= 1


def evict_from_page_cache(path: str | Path) -> None:
    """Write back and drop a file's pages from the page cache (any process may); skip where the
    file system keeps them anyway (tmpfs), since then nothing here can be cold."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if cached_pread(fd, 4096, 0) is not None:
            pytest.skip(f"the file system of {path} keeps its pages in memory")
    finally:
        os.close(fd)


def test_a_closed_segment_closes_the_connection_before_its_frame_starts(tmp_path: Path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"x" * 1000)
    gone = LogFile.open(str(path))
    gone.close()
    responses: list[list[FramePart]] = [[b"first"], [b"second", FileSlice(str(path), 0, 1000, gone)]]
    assert uvloop.run(_exchange(responses, zero_copy=True)) == b"first"


def test_a_reader_slower_than_the_socket_still_gets_its_ranges_spliced(log_file, monkeypatch):
    """The socket fills long before a 12 MiB response is out: each time the transport has drained,
    the range is spliced again, and only the small pieces that ask to be told of the drain are copied
    through Python (before, everything after the first full socket was)."""
    copied = []

    def counting(read):  # type: ignore[no-untyped-def]
        def counted(self):  # type: ignore[no-untyped-def]
            data = read(self)
            copied.append(len(data) if data is not None else 0)
            return data
        return counted

    monkeypatch.setattr(FileSlice, "read", counting(FileSlice.read))
    monkeypatch.setattr(FileSlice, "read_cached", counting(FileSlice.read_cached))
    size = 12 << 20
    responses: list[list[FramePart]] = [[b"head", FileSlice(log_file.path, 0, size, log_file), b"tail"]]
    received = uvloop.run(_exchange(responses, zero_copy=True, receive_buffer=64 * 1024))
    assert received == b"head" + log_file_bytes(log_file, size) + b"tail"
    assert sum(copied) < size // 10, f"{sum(copied)} of {size} bytes copied through Python"


def log_file_bytes(log_file: LogFile, size: int) -> bytes:
    with open(log_file.path, "rb") as f:
        return f.read(size)
