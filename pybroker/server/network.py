"""One asyncio.Protocol per client connection: frames in, responses out in request order.

Requests on a connection run concurrently (pipelining) but their responses are written in the
order the requests arrived, as Kafka clients require. Reading pauses while too many requests are
in flight or while the transport's write buffer is full, so a fast client cannot grow our memory
without bound. A frame that cannot be parsed closes that connection. The log lines for closed
connections are rate-limited per reason (`LogLimiter`), so a client repeating bad frames cannot
grow the log without bound either.

Zero-copy fetch. A response arrives as ordered parts: bytes, and log file ranges (Fetch records).
uvloop's transports cannot sendfile, so while the transport has nothing buffered the parts go
straight to the non-blocking socket (``os.write``, ``os.sendfile``); whatever the socket does not
take at once is read into memory and handed to ``transport.write``, which keeps the byte order.
With bytes already buffered, or with ``zero_copy`` off, every range is read and written through
the transport. All ranges are checked (or read) before the first byte of a frame goes out; a
range that still fails half-way (truncated under us) closes the connection with one log line.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
from typing import TYPE_CHECKING

from pybroker.common.log_limit import LogLimiter
from pybroker.log.errors import LogError
from pybroker.log.file_slice import FileSlice
from pybroker.protocol.errors import DecodeError, FrameTooLarge
from pybroker.protocol.frame import FrameDecoder
from pybroker.protocol.primitives import FramePart

if TYPE_CHECKING:
    from pybroker.server.dispatcher import Dispatcher

log = logging.getLogger("pybroker.network")
limited_log = LogLimiter(log)


class CloseConnection(Exception):
    """Raised by the dispatcher when Kafka would drop the connection (e.g. unknown API key)."""


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatcher: "Dispatcher", *, max_frame_size: int, max_in_flight: int,
                 connections: set["KafkaConnection"], zero_copy: bool = True):
        self._dispatcher = dispatcher
        self._zero_copy = zero_copy
        self._socket_fd = -1
        self._decoder = FrameDecoder(max_frame_size)
        self._max_in_flight = max_in_flight
        self._connections = connections
        self._pending: collections.deque[asyncio.Future[bytes | list[FramePart] | None]] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._reading_paused = False
        self._writing_paused = False

    # asyncio.Protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are duck-typed
        self._connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sock is not None:
            self._socket_fd = sock.fileno()
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except (FrameTooLarge, DecodeError) as exc:
            limited_log.warning("bad-frame", "Closing connection from %s: %s", self._peer, exc)
            self.close()
            return
        loop = asyncio.get_running_loop()
        for frame in frames:
            task = loop.create_task(self._dispatcher.dispatch(frame, self._peer))
            self._pending.append(task)
            task.add_done_callback(self._on_response_ready)
        self._update_reading()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # Internals

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _on_response_ready(self, _: asyncio.Future[bytes | list[FramePart] | None]) -> None:
        pending = self._pending
        while pending and pending[0].done():
            future = pending.popleft()
            if future.cancelled() or self._transport is None:
                continue
            exc = future.exception()
            if exc is not None:
                if isinstance(exc, (CloseConnection, DecodeError)):
                    limited_log.warning("rejected-request", "Closing connection from %s: %s", self._peer, exc)
                else:
                    limited_log.log(logging.ERROR, f"unexpected-{type(exc).__name__}",
                                    "Closing connection from %s after an unexpected error", self._peer, exc_info=exc)
                self.close()
                return
            response = future.result()
            if response is not None and not self._send([response] if isinstance(response, bytes) else response):
                self.close()
                return
        self._update_reading()

    def _send(self, parts: list[FramePart]) -> bool:
        """Write one response frame after those before it; False if the connection must close."""
        transport = self._transport
        assert transport is not None
        try:
            if self._zero_copy and self._socket_fd >= 0 and transport.get_write_buffer_size() == 0 \
                    and any(isinstance(part, FileSlice) for part in parts):
                self._send_direct(transport, parts)
            else:
                for data in [_in_memory(part) for part in parts]:
                    transport.write(data)
        except LogError as exc:
            limited_log.warning("unreadable-range", "Closing connection from %s: a fetched log range became "
                                "unreadable: %s", self._peer, exc)
            return False
        except OSError as exc:  # usually the client went away mid-response
            limited_log.log(logging.INFO, "send-failed", "Closing connection from %s: send failed: %s", self._peer, exc)
            return False
        return True

    def _send_direct(self, transport: asyncio.Transport, parts: list[FramePart]) -> None:
        """Send parts on the socket itself until it would block, then queue the rest in order."""
        for part in parts:
            if isinstance(part, FileSlice):
                part.fileno()  # a deleted segment fails here, before the frame's first byte
        fd = self._socket_fd
        for index, part in enumerate(parts):
            sent = 0
            try:
                if isinstance(part, FileSlice):
                    while sent < part.size:
                        count = part.send(fd, sent)
                        if count == 0:
                            raise LogError(f"{part.path} ends before {part.end} (truncated)")
                        sent += count
                else:
                    view = memoryview(part)
                    while sent < view.nbytes:
                        sent += os.write(fd, view[sent:])
            except BlockingIOError:
                rest = _in_memory(part)
                transport.write(memoryview(rest)[sent:])
                for later in parts[index + 1:]:
                    transport.write(_in_memory(later))
                return

    def _update_reading(self) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        should_pause = self._writing_paused or len(self._pending) >= self._max_in_flight
        if should_pause and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False


def _in_memory(part: FramePart) -> bytes | bytearray | memoryview:
    """A part's bytes: buffers as they are, file ranges read with one pread."""
    return part.read() if isinstance(part, FileSlice) else part
