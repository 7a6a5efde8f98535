"""The machine's own limits, served by minimal uvloop servers.

`python -m benchmarks.sink FILE` appends what it receives over loopback TCP to FILE; at the sender's end
of stream it answers one byte, so the sender's clock covers receive and append.
`python -m benchmarks.sink --answer SIZE` frames requests by their Kafka size prefix and answers each
with a response of SIZE bytes after the size (the request's correlation id, then zeros): what one small
request costs a Python server that does nothing else. Both print their port on the first line of stdout
and serve until terminated.
"""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import uvloop

from benchmarks.brokers import HOST, REPO


class _Append(asyncio.Protocol):
    """Append every chunk received to the file; answer b"k" at end of stream."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        os.write(self.fd, data)

    def eof_received(self) -> bool:
        assert self.transport is not None
        self.transport.write(b"k")
        return False


class _Answer(asyncio.Protocol):
    """Answer each whole request frame at once with `size` bytes: its correlation id, then zeros."""

    def __init__(self, size: int) -> None:
        self.prefix = struct.pack(">i", size)
        self.zeros = bytes(size - 4)
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        buffer = self.buffer
        buffer += data
        while len(buffer) >= 12:  # size, then the request header's key, version and correlation id
            end = 4 + int.from_bytes(buffer[:4], "big")
            if len(buffer) < end:
                break
            self.transport.write(self.prefix + buffer[8:12] + self.zeros)
            del buffer[:end]


async def _serve(factory: Callable[[], asyncio.Protocol]) -> None:
    server = await asyncio.get_running_loop().create_server(factory, HOST, 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def _append_to(path: Path) -> Callable[[], asyncio.Protocol]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return lambda: _Append(fd)


@contextmanager
def running_sink(path: Path) -> Iterator[int]:
    """Run the sink as a child process appending to `path`; yield its port."""
    with _running(str(path)) as (port, _pid):
        yield port


@contextmanager
def running_answerer(size: int) -> Iterator[tuple[int, int]]:
    """Run the answering server as a child process answering `size` bytes per request; yield its port and pid."""
    with _running("--answer", str(size)) as served:
        yield served


@contextmanager
def _running(*args: str) -> Iterator[tuple[int, int]]:
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.sink", *args], stdout=subprocess.PIPE,
                               text=True, cwd=REPO, start_new_session=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"sink did not start (exit code {process.poll()})")
        yield int(line), process.pid
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    if sys.argv[1] == "--answer":
        size = int(sys.argv[2])
        uvloop.run(_serve(lambda: _Answer(size)))
    else:
        uvloop.run(_serve(_append_to(Path(sys.argv[1]))))
