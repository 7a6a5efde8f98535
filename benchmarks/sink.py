"""The machine's own limit: a minimal uvloop server that appends what it receives over loopback TCP to a file.

`python -m benchmarks.sink FILE` prints its port on the first line of stdout and serves until terminated;
at the sender's end of stream it answers one byte, so the sender's clock covers receive and append.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
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


async def _serve(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    server = await asyncio.get_running_loop().create_server(lambda: _Append(fd), HOST, 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


@contextmanager
def running_sink(path: Path) -> Iterator[int]:
    """Run the sink as a child process appending to `path`; yield its port."""
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.sink", str(path)], stdout=subprocess.PIPE,
                               text=True, cwd=REPO, start_new_session=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"sink did not start (exit code {process.poll()})")
        yield int(line)
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    uvloop.run(_serve(Path(sys.argv[1])))
