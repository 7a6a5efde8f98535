"""One asyncio.Protocol per client connection: frames in, responses out in request order.

Requests on a connection run concurrently (pipelining) but their responses are written in the
order the requests arrived, as Kafka clients require. Bounds, so that one client can neither grow
our memory nor starve the others (Kafka's SocketServer has the same ones):

- a connection handles at most ``max_in_flight`` requests at once; frames decoded past that wait,
  undispatched, in the chunk they arrived in, and reading stops;
- a finished response is written only while the transport is not asking us to pause: a peer that
  does not read keeps its answers queued lazily (file ranges are read in ``CHUNK`` pieces only as
  the socket drains), and reading from it stops (Kafka mutes such a channel);
- a connection muted by a quota throttle (KIP-219, `mute_connection`) reads and dispatches nothing
  until the throttle time has passed, as Kafka mutes a throttled channel;
- all connections share one ``RequestQueue``: ``queued.max.requests`` requests being handled (a
  request waiting for other clients, e.g. a Fetch long poll, leaves the count: `leave_request_queue`), and
  ``queued.max.request.bytes`` of large frames, reserved at their declared size when their size
  prefix arrives (Kafka's non-strict MemoryPool) and released when their handler finishes. A
  connection that finds the queue full stops reading until room is freed.

A frame that cannot be parsed closes that connection. The log lines for closed
connections are rate-limited per reason (`LogLimiter`), so a client repeating bad frames cannot
grow the log without bound either.

Zero-copy fetch. A response arrives as ordered parts: bytes, and log file ranges (Fetch records).
uvloop's transports cannot sendfile, so while the transport has nothing buffered the parts go
straight to the non-blocking socket (``os.write``, ``os.sendfile``); whatever the socket does not
take at once is queued. Such a connection's transport pauses us on any byte it has to hold and
resumes us once it has handed them all to the socket: when a splice finds the socket full, a small
piece of the range (``NOTIFY_CHUNK``) goes through ``transport.write``, and splicing goes on at the
resume. Without zero-copy, file ranges are read ``CHUNK`` bytes at a time as the peer drains the
transport: from the page cache on the loop, or, for a chunk the cache does not hold, on the broker's
I/O thread while this connection's writing waits for it. All ranges are checked before the first
byte of a frame goes out; a range that still fails half-way (truncated under us) closes the
connection with one log line.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Generator, Protocol

from mypy_extensions import mypyc_attr

from pybroker.common.io_executor import IoExecutor
from pybroker.common.log_limit import LogLimiter
from pybroker.log.errors import LogError
from pybroker.log.file_slice import FileSlice
from pybroker.protocol.errors import DecodeError, FrameTooLarge
from pybroker.protocol.frame import FrameDecoder
from pybroker.protocol.primitives import FramePart
from pybroker.server.request_channel import (
    UNBOUNDED,
    CloseConnection,
    FinalResponse,
    RequestQueue,
    RequestSlot,
    Response,
    start_request,
)

log = logging.getLogger("pybroker.network")
limited_log = LogLimiter(log)

_Part = bytes | bytearray | memoryview | FileSlice
"""A piece of a response as a connection sends it: a buffer, or a log file range it splices."""

CHUNK = 1 << 20  # bytes of a file range read per write once the socket has stopped taking data
# With zero-copy, when a splice finds the socket full, this much of the range goes through the transport
# instead, only so that the transport pauses us and tells us when the socket has drained.
NOTIFY_CHUNK = 16 * 1024


@dataclass(eq=False, slots=True)
class InFlight(RequestSlot):
    """A request's place in its connection's response order: the answer its handler's first step
    gave, or the task running the rest of the handler. Also its place in the request queue (one
    object per request, not two)."""

    task: asyncio.Task[Response] | None = None
    ready: bool = False
    value: Response = None
    error: BaseException | None = None

    def done(self) -> bool:
        return self.ready if self.task is None else self.task.done()

    def outcome(self) -> tuple[bool, BaseException | None, Response]:
        """A finished request's (cancelled, error, answer), read in one call."""
        task = self.task
        if task is None:
            return isinstance(self.error, asyncio.CancelledError), self.error, self.value
        if task.cancelled():
            return True, None, None
        error = task.exception()
        return False, error, task.result() if error is None else None

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


class _Rest:
    """The rest of a handler whose first step ran in `KafkaConnection._dispatch` and yielded `waiting_on`.

    Awaited by the request's task, it hands the task what the handler waits for, exactly as the handler's
    own task would have seen it: the task waits on that future, resumes the handler when it is done (the
    handler reads the outcome itself) and throws its cancellation into it. No extra pass of the loop."""

    def __init__(self, coroutine: Coroutine[Any, Any, Response], waiting_on: Any) -> None:
        self._coroutine = coroutine
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, None, Response]:
        coroutine, waiting_on = self._coroutine, self._waiting_on
        while True:
            thrown: BaseException | None = None
            try:
                yield waiting_on
            except GeneratorExit:  # the task itself is being closed: close the handler with it
                coroutine.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - the task's cancellation, for the handler
                thrown = exc
            try:
                waiting_on = coroutine.send(None) if thrown is None else coroutine.throw(thrown)
            except StopIteration as stop:
                return stop.value


async def _rest(coroutine: Coroutine[Any, Any, Response], waiting_on: Any) -> Response:
    return await _Rest(coroutine, waiting_on)


class RequestDispatcher(Protocol):
    """What a connection needs of server/dispatcher.py's Dispatcher. A protocol rather than the class: the
    compiled build (common/native.py) would check every dispatcher passed in against the class itself.
    ``dispatch`` is called with the connection's session only when the connection was given one, and gives the
    answer or a coroutine that answers."""

    @property
    def io(self) -> IoExecutor | None: ...

    def dispatch(self, frame: memoryview, peer: str,
                 session: Any = None) -> Response | Coroutine[Any, Any, Response]: ...


@mypyc_attr(allow_interpreted_subclasses=True)  # socket_server's connections subclass it
class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatcher: RequestDispatcher, *, max_frame_size: int, max_in_flight: int,
                 connections: set["KafkaConnection"], zero_copy: bool = True, queue: RequestQueue | None = None,
                 frame_limit: Callable[[], int | None] | None = None, session: Any = None):
        """``frame_limit``, when given, is asked before each read for a lower frame size limit than
        ``max_frame_size`` that applies now (a SASL connection before it authenticated), or None.
        ``session``, when given, is passed with each request to ``dispatcher.dispatch`` (the connection's
        listener, principal and SASL state: server/context.py's ConnectionSession)."""
        self._dispatcher = dispatcher
        self._dispatch_request = dispatcher.dispatch  # bound once: a lookup less per request
        self.session = session
        self._zero_copy = zero_copy
        self._socket_fd = -1
        self._splicing = False  # zero-copy on a plain socket: file ranges go out by os.sendfile
        self._decoder = FrameDecoder(max_frame_size)
        self._max_frame_size = max_frame_size
        self._frame_limit = frame_limit
        self._max_in_flight = max_in_flight
        self._connections = connections
        self._queue = queue if queue is not None else RequestQueue()
        self._pending: collections.deque[InFlight] = collections.deque()
        self._in_backlog = False  # _dispatch_backlog is running (a finished request must not re-enter it)
        self._reading = False  # data_received is dispatching: it updates reading once, after its frames
        self._backlog: collections.deque[memoryview] = collections.deque()  # decoded, not yet dispatched
        self._out: collections.deque[_Part] = collections.deque()  # rest of the response being written
        self._io: IoExecutor | None = dispatcher.io
        self._out_reading = False  # a cold range of `_out` is being read on an I/O thread
        self._transport: asyncio.Transport | None = None
        self.peer = "?"
        self._reading_paused = False
        self._writing_paused = False
        self._muted_until = 0.0
        self._unmute: asyncio.TimerHandle | None = None  # set while muted by a quota throttle
        # Memory reservations (only with queued.max.request.bytes): the frame being received, and
        # a received frame not yet dispatched.
        self._reserved = 0
        self._waiting_for_memory = False
        self._held_frame: memoryview | None = None
        self._held_size = 0
        # Read by the periodic sweep (`expired`): traffic since the last sweep, frames received.
        self._active = False
        self._received = 0
        self._quiet_since = 0.0
        self._receive_mark = 0  # the first request's clock starts at connection_made
        self._receiving_since = 0.0

    # asyncio.Protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are duck-typed
        self._connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sock is not None:
            self._socket_fd = sock.fileno()
        self._splicing = self._zero_copy and self._socket_fd >= 0
        if self._splicing:
            # pause on any byte the socket did not take, resume once all went out: the moments to splice again
            transport.set_write_buffer_limits(high=0, low=0)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._quiet_since = self._receiving_since = asyncio.get_running_loop().time()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        if self._unmute is not None:
            self._unmute.cancel()
            self._unmute = None
        for request in self._pending:
            request.cancel()  # the tasks' done callbacks give the queue its room back
        self._pending.clear()
        self._backlog.clear()
        self._out.clear()
        self._transport = None
        queue = self._queue
        queue.waiting.discard(self)
        if self._reserved or self._held_size:
            queue.release_bytes(self._reserved + self._held_size)
            self._reserved = self._held_size = 0
            self._held_frame = None

    def data_received(self, data: bytes) -> None:
        self._active = True
        if self._frame_limit is not None:
            limit = self._frame_limit()
            self._decoder.max_frame_size = self._max_frame_size if limit is None else min(limit, self._max_frame_size)
        try:
            frames = self._decoder.feed(data)
        except (FrameTooLarge, DecodeError) as exc:
            limited_log.warning("bad-frame", "Closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        if self._queue.max_bytes >= 0:
            self._account(frames)
        if frames:
            self._received += len(frames)
            self._reading = True  # the requests answered at once leave reading to the line below
            try:
                if self._unmute is not None or self._backlog or len(self._pending) + len(frames) > self._max_in_flight \
                        or self._queue.requests + len(frames) > self._queue.max_requests:
                    self._backlog.extend(frames)
                    self._dispatch_backlog()
                else:
                    for frame in frames:
                        self._dispatch(frame)
            finally:
                self._reading = False
        if self._reading_paused or self._writing_paused or self._waiting_for_memory or self._unmute is not None \
                or self._backlog or len(self._pending) >= self._max_in_flight:  # else reading goes on as it is
            self._update_reading()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._active = True  # the peer has read
        self._write_ready()

    # Called by the socket server and the request queue

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def mute(self, seconds: float) -> None:
        """Read and dispatch nothing for ``seconds`` (or until a longer mute already set ends)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if seconds <= 0 or until <= self._muted_until or self._transport is None:
            return
        self._muted_until = until
        if self._unmute is not None:
            self._unmute.cancel()
        self._unmute = loop.call_at(until, self._unmuted)
        self._update_reading()

    def _unmuted(self) -> None:
        self._unmute = None
        if self._transport is None:
            return
        self._dispatch_backlog()
        self._update_reading()

    def expired(self, now: float, idle_s: float, receive_s: float) -> str | None:
        """The config key whose limit this connection has passed, if any (checked by a periodic sweep).

        Idle: no bytes moved either way while no request is being handled (a peer that stops
        reading its responses goes idle, as in Kafka). Receive: the first request, or a request
        whose first bytes arrived, still incomplete while the broker was reading."""
        held_by_us = self._waiting_for_memory or self._unmute is not None or bool(self._backlog) \
            or any(not f.done() for f in self._pending)
        if self._active or held_by_us:
            self._active = False
            self._quiet_since = now
        elif now - self._quiet_since >= idle_s:
            return "connections.max.idle.ms"
        if self._reading_paused or (self._received and not self._decoder.buffered):
            self._receive_mark = -1
        elif self._receive_mark != self._received:
            self._receive_mark, self._receiving_since = self._received, now
        elif now - self._receiving_since >= receive_s:
            return "request.receive.timeout.ms"
        return None

    def resume_from_queue(self) -> None:
        if self._transport is None:
            return
        if self._waiting_for_memory:
            self._waiting_for_memory = False
            self._account(())
        self._dispatch_backlog()
        self._update_reading()

    # Internals: requests

    def _account(self, frames: list[memoryview] | tuple[()]) -> None:
        """Reserve a large frame's declared size in the queue when its size prefix arrives."""
        if frames and self._reserved:  # the frame that was being received is frames[0]
            self._held_frame, self._held_size = frames[0], self._reserved
            self._reserved = 0
        partial = self._decoder.partial_frame_size
        if partial and not self._reserved and not self._waiting_for_memory:
            if self._queue.reserve(partial):
                self._reserved = partial
            else:
                self._waiting_for_memory = True
                self._queue.waiting.add(self)

    def _dispatch(self, frame: memoryview) -> None:
        """Start the request's handler at once: its first step runs here, as Python 3.12's eager tasks
        run it, so a request answered without waiting (most are) is written in this same callback, with
        no task and no extra pass of the loop. A handler that waits goes on in a task of its own."""
        queue = self._queue
        request = InFlight(queue, self)
        context = contextvars.copy_context()
        queue.requests += 1
        held = 0
        if frame is self._held_frame:
            held, self._held_frame, self._held_size = self._held_size, None, 0
        self._pending.append(request)  # its place in the response order, before anything it runs
        try:
            outcome = context.run(start_request, request, self._dispatch_request, frame, self.peer, self.session)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # as a task would keep it: _write_ready logs it and closes
            request.error, request.ready = exc, True
        else:
            if type(outcome) is tuple:  # the handler waits: (its coroutine, what it waits on)
                task = asyncio.get_running_loop().create_task(_rest(*outcome), context=context)
                request.task = task
                task.add_done_callback(functools.partial(self._on_task_done, request, held))
                return
            request.value, request.ready = outcome, True  # (no method call: most requests end here)
        # _on_task_done's work, and RequestSlot.release's, inlined for the requests answered at once: a call is a
        # frame on Python 3.11
        if request.held:
            request.held = False
            queue.requests -= 1
            if queue.waiting:
                queue.wake()
        if held:
            queue.release_bytes(held)
        self._write_ready()

    def _dispatch_backlog(self) -> None:
        if self._in_backlog:  # a request it started finished at once: the loop below goes on
            return
        backlog, queue = self._backlog, self._queue
        self._in_backlog = True
        try:
            while backlog and self._unmute is None and len(self._pending) < self._max_in_flight:
                if queue.requests >= queue.max_requests:
                    queue.waiting.add(self)
                    break
                self._dispatch(backlog.popleft())
        finally:
            self._in_backlog = False

    def _on_task_done(self, slot: RequestSlot, held: int, _: object) -> None:
        slot.release()
        if held:
            self._queue.release_bytes(held)
        self._write_ready()

    # Internals: responses

    def _write_ready(self) -> None:
        """Write finished responses in request order for as long as the peer keeps reading."""
        pending = self._pending
        try:
            while not self._writing_paused and self._transport is not None and not self._out_reading:
                if self._out:
                    self._pump()
                    continue
                if not pending:
                    break
                head = pending[0]
                if head.task is None:  # answered by its handler's first step (InFlight.outcome, inlined)
                    if not head.ready:
                        break
                    pending.popleft()
                    exc, response = head.error, head.value
                    cancelled = exc is not None and isinstance(exc, asyncio.CancelledError)
                else:
                    if not head.task.done():
                        break
                    cancelled, exc, response = pending.popleft().outcome()
                if cancelled:
                    continue
                if exc is not None:
                    if isinstance(exc, (CloseConnection, DecodeError)):
                        if not getattr(exc, "logged", False):  # the dispatcher may have said why already
                            limited_log.warning("rejected-request", "Closing connection from %s: %s", self.peer, exc)
                    else:
                        limited_log.log(logging.ERROR, f"unexpected-{type(exc).__name__}",
                                        "Closing connection from %s after an unexpected error", self.peer,
                                        exc_info=exc)
                    self.close()
                    return
                if isinstance(response, FinalResponse):
                    self._send(response.parts if isinstance(response.parts, list) else [response.parts])
                    self.close()
                    return
                if isinstance(response, bytes):
                    self._transport.write(response)
                    self._active = True
                elif type(response) is list and len(response) == 1 \
                        and isinstance(part := response[0], (bytes, bytearray, memoryview)):
                    self._transport.write(part)  # most answers: one buffer (_send's first case, inlined)
                    self._active = True
                elif response is not None:
                    self._send(response)
        except LogError as exc:
            limited_log.warning("unreadable-range", "Closing connection from %s: a fetched log range became "
                                "unreadable: %s", self.peer, exc)
            self.close()
            return
        except OSError as exc:  # usually the client went away mid-response
            limited_log.log(logging.INFO, "send-failed", "Closing connection from %s: send failed: %s", self.peer, exc)
            self.close()
            return
        if self._backlog:
            self._dispatch_backlog()
        if not self._reading:
            self._update_reading()

    def _send(self, frame: list[FramePart]) -> None:
        """Start one response frame: in-memory parts go to the transport, file ranges are queued
        in `_out` (after a direct sendfile while nothing is buffered)."""
        transport = self._transport
        assert transport is not None
        self._active = True
        # A frame's parts are typed with the Spliced protocol; the only one the broker builds is a FileSlice.
        # (An annotation, not typing.cast: cast is a call and list[_Part] an object built per response.)
        parts: list[_Part] = frame  # type: ignore[assignment]
        if len(parts) == 1 and not isinstance(parts[0], FileSlice):  # most answers: one buffer
            transport.write(parts[0])
            return
        buffers = [part for part in parts if not isinstance(part, FileSlice)]
        if len(buffers) == len(parts):
            for buffer in buffers:
                transport.write(buffer)
            return
        for part in parts:
            if isinstance(part, FileSlice):
                part.fileno()  # a deleted segment fails here, before the frame's first byte
        if self._splicing and transport.get_write_buffer_size() == 0:
            self._send_direct(parts)
        else:
            self._out.extend(parts)

    def _send_direct(self, parts: list[_Part]) -> None:
        """Send parts on the socket itself until it would block, then queue the rest in order."""
        fd = self._socket_fd
        for index, part in enumerate(parts):
            if isinstance(part, FileSlice):
                sent = self._splice(part)
                if sent == part.size:
                    continue
                self._out.append(part.after(sent))
                self._out.extend(parts[index + 1:])
                return
            view = memoryview(part)
            sent = 0
            try:
                while sent < view.nbytes:
                    sent += os.write(fd, view[sent:])
            except BlockingIOError:
                self._out.append(view[sent:])
                self._out.extend(parts[index + 1:])
                return

    def _splice(self, part: FileSlice) -> int:
        """``os.sendfile`` the range to the socket until it is sent or the socket is full; bytes sent."""
        sent = 0
        with contextlib.suppress(BlockingIOError):  # the socket is full: the caller queues the rest
            while sent < part.size:
                count = part.send(self._socket_fd, sent)
                if count == 0:
                    raise LogError(f"{part.path} ends before {part.end} (truncated)")
                sent += count
        return sent

    def _pump(self) -> None:
        """Write one queued part, a file range at most CHUNK bytes of it: memory per connection
        stays at the transport's high-water mark plus one chunk, whatever the response size.

        With zero-copy the transport pauses us on any byte it holds and resumes us once it holds none:
        then a range is spliced again until the socket is full, and only NOTIFY_CHUNK of it goes through
        the transport, to be told when to splice the rest. A chunk the page cache does not hold is read
        on an I/O thread; writing waits for it."""
        assert self._transport is not None
        part = self._out.popleft()
        if isinstance(part, FileSlice):
            chunk = CHUNK
            if self._splicing and self._transport.get_write_buffer_size() == 0:
                sent = self._splice(part)
                if sent == part.size:
                    return
                part = part.after(sent)
                chunk = NOTIFY_CHUNK
            if part.size > chunk:
                self._out.appendleft(part.after(chunk))
                part = part.first(chunk)
            if self._io is None:
                self._transport.write(part.read())
                return
            data = part.read_cached()
            if data is None:
                self._read_off_loop(self._io, part)
                return
            self._transport.write(data)
        else:
            self._transport.write(part)

    def _read_off_loop(self, io: IoExecutor, part: FileSlice) -> None:
        io.cold_reads["response"] += 1
        read = part.detached_read()  # a deleted segment fails here, on the loop, as `part.read()` would
        self._out_reading = True
        asyncio.ensure_future(io.run(read)).add_done_callback(self._cold_range_read)

    def _cold_range_read(self, future: asyncio.Future[bytes]) -> None:
        self._out_reading = False
        if future.cancelled() or self._transport is None or self._transport.is_closing():
            return
        exc = future.exception()
        if isinstance(exc, LogError):
            limited_log.warning("unreadable-range", "Closing connection from %s: a fetched log range became "
                                "unreadable: %s", self.peer, exc)
            self.close()
            return
        if exc is not None:
            limited_log.log(logging.ERROR, f"unexpected-{type(exc).__name__}",
                            "Closing connection from %s after an unexpected error", self.peer, exc_info=exc)
            self.close()
            return
        self._transport.write(future.result())
        self._active = True
        self._write_ready()

    def _update_reading(self) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        should_pause = self._writing_paused or self._waiting_for_memory or self._unmute is not None \
            or bool(self._backlog) \
            or len(self._pending) >= self._max_in_flight
        if should_pause and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False
