"""What passes between the connections and the request handlers (Kafka's RequestChannel): the
response shapes a handler returns, the broker-wide request queue, and the two things a handler may
ask of the connection its request came on without knowing it: leave the request queue while it
waits for others (`leave_request_queue`), and mute the connection for a quota throttle (`mute_connection`).

The connection of the request being handled is found through a context variable that
`network.KafkaConnection` sets as it runs a handler (`start_request`), so the handlers, the quota code and the
replica manager's waits need no reference to the network layer.
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Protocol

from pybroker.protocol.primitives import FramePart

UNBOUNDED = 2**31 - 1


class QueuedConnection(Protocol):
    """A connection as the request queue and a quota throttle see it."""

    def resume_from_queue(self) -> None: ...

    def mute(self, seconds: float) -> None: ...


class CloseConnection(Exception):
    """Raised by the dispatcher when Kafka would drop the connection (e.g. unknown API key); ``logged`` when
    the dispatcher has said why already."""

    def __init__(self, message: str, *, logged: bool = False) -> None:
        super().__init__(message)
        self.logged = logged


@dataclass(frozen=True, slots=True)
class FinalResponse:
    """A response after which the connection closes (a client refused by SASL, as Kafka closes it
    after an ILLEGAL_SASL_STATE answer): written in its turn, then the transport closed, which
    still flushes what was written."""

    parts: bytes | list[FramePart]


Response = bytes | list[FramePart] | FinalResponse | None


@dataclass(eq=False)
class RequestQueue:
    """The broker-wide bounds all connections share: requests being handled, and bytes reserved
    for large frames (``max_bytes`` -1 = unbounded). Connections that found it full wait in
    ``waiting`` and are resumed as room is freed."""

    max_requests: int = UNBOUNDED
    max_bytes: int = -1
    requests: int = 0
    bytes: int = 0
    waiting: set[QueuedConnection] = field(default_factory=set)

    def reserve(self, size: int) -> bool:
        """Non-strict, as Kafka's SimpleMemoryPool: granted whenever any room is left."""
        if self.bytes >= self.max_bytes:
            return False
        self.bytes += size
        return True

    def release_bytes(self, size: int) -> None:
        self.bytes -= size
        self.wake()

    def wake(self) -> None:
        """Resume the waiting connections in the loop's next pass, not here: this runs inside a handler
        (`leave_request_queue`), and their requests start at once when dispatched."""
        if self.waiting and self.requests < self.max_requests:
            waiting, self.waiting = self.waiting, set()
            loop = asyncio.get_running_loop()
            for connection in waiting:
                loop.call_soon(connection.resume_from_queue)


@dataclass(eq=False, slots=True)
class RequestSlot:
    """A request's place among the ``queued.max.requests`` being handled, given back when it ends
    or when it starts waiting for something other clients must make happen (`leave_request_queue`);
    and the connection it came on (`mute_connection`)."""

    queue: RequestQueue
    connection: QueuedConnection | None = None
    held: bool = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.queue.requests -= 1
            if self.queue.waiting:
                self.queue.wake()


# One variable for both (the slot names its connection): a request sets one, not two.
_REQUEST_SLOT: contextvars.ContextVar[RequestSlot | None] = contextvars.ContextVar("request_slot", default=None)


_COROUTINE = types.CoroutineType


def start_request(slot: RequestSlot, dispatch: Callable[..., Any], frame: memoryview, peer: str, session: Any) -> Any:
    """Run in the request's own context (``Context.run``): enter the request, then dispatch it and run the first
    step of the coroutine that answers it, if the dispatcher gave one (``session`` passed only when not None): the
    answer, or, if the handler waits, a tuple of its coroutine and what that first step yielded (no answer is a
    tuple; a tuple rather than a class of its own, whose construction would cost a waiting request a Python call).
    One pass into the context for all of it."""
    _REQUEST_SLOT.set(slot)
    outcome = dispatch(frame, peer) if session is None else dispatch(frame, peer, session)
    if type(outcome) is not _COROUTINE:
        return outcome
    try:
        waiting_on = outcome.send(None)
    except StopIteration as stop:
        return stop.value
    return outcome, waiting_on


def leave_request_queue() -> None:
    """Called by a handler about to wait for other clients or brokers (a Fetch long poll, acks=all,
    a rebalance): its request stops counting against ``queued.max.requests``, as a Kafka request
    parked in a purgatory no longer holds a request-queue place, so that many waiting consumers
    cannot keep every other request out. Outside a connection's request it does nothing."""
    slot = _REQUEST_SLOT.get()
    if slot is not None:
        slot.release()


def mute_connection(seconds: float) -> None:
    """KIP-219: the request's response goes out at once with its throttle time, and its connection
    reads nothing more for ``seconds`` (Kafka mutes the channel until the throttle has passed, so a
    client that ignores throttle_time_ms cannot send around it). Outside a connection's request it
    does nothing."""
    slot = _REQUEST_SLOT.get()
    if slot is not None and slot.connection is not None:
        slot.connection.mute(seconds)
