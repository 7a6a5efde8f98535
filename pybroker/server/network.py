"""One asyncio.Protocol per client connection: frames in, responses out in request order.

Requests on a connection run concurrently (pipelining) but their responses are written in the
order the requests arrived, as Kafka clients require. Reading pauses while too many requests are
in flight or while the transport's write buffer is full, so a fast client cannot grow our memory
without bound. A frame that cannot be parsed closes that connection, with one log line.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from typing import TYPE_CHECKING

from pybroker.protocol.errors import DecodeError, FrameTooLarge
from pybroker.protocol.frame import FrameDecoder

if TYPE_CHECKING:
    from pybroker.server.dispatcher import Dispatcher

log = logging.getLogger("pybroker.network")


class CloseConnection(Exception):
    """Raised by the dispatcher when Kafka would drop the connection (e.g. unknown API key)."""


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatcher: "Dispatcher", *, max_frame_size: int, max_in_flight: int,
                 connections: set["KafkaConnection"]):
        self._dispatcher = dispatcher
        self._decoder = FrameDecoder(max_frame_size)
        self._max_in_flight = max_in_flight
        self._connections = connections
        self._pending: collections.deque[asyncio.Future[bytes | None]] = collections.deque()
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
            log.warning("Closing connection from %s: %s", self._peer, exc)
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

    def _on_response_ready(self, _: asyncio.Future[bytes | None]) -> None:
        pending = self._pending
        while pending and pending[0].done():
            future = pending.popleft()
            if future.cancelled() or self._transport is None:
                continue
            exc = future.exception()
            if exc is not None:
                if isinstance(exc, (CloseConnection, DecodeError)):
                    log.warning("Closing connection from %s: %s", self._peer, exc)
                else:
                    log.error("Closing connection from %s after an unexpected error", self._peer, exc_info=exc)
                self.close()
                return
            response = future.result()
            if response is not None:
                self._transport.write(response)
        self._update_reading()

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
