"""Where quotas meet requests: the handler wrapper every API runs through, and the hooks the
Produce, Fetch and topic-mutation handlers call, as Kafka's KafkaApis does.

For each request while any quota is enabled (nothing at all otherwise):

1. a client with a quota has its connection's requests handled one at a time, as Kafka handles
   one request of a connection at a time (pybroker otherwise pipelines them), and none while the
   connection is muted by an earlier throttle: a request the client had pipelined before the mute
   waits, holding no ``queued.max.requests`` place. Clients without a quota are not affected;
2. the handler runs with a `RequestQuota` in a context variable; byte-rate and mutation hooks
   record there the throttle their quota asks for;
3. the request quota records the handler's own time (the event-loop time of the handler's steps,
   summed between its awaits: waits for other clients, the disk on an I/O thread or long polls
   are not counted, as Kafka counts request-thread time and not purgatory time) as a percentage
   of one second; inter-broker requests, follower fetches and acks=0 produces are exempt;
4. the largest throttle goes into the response's ``throttle_time_ms`` (KIP-219: the response is
   sent at once) and the connection is muted for that long: its socket is not read
   (`mute_connection`) and its requests already read wait; the winning quota's throttle-time
   metric records it.
"""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Generator

from pybroker.common.clock import Clock
from pybroker.controller.quota_store import sanitize
from pybroker.protocol.api_keys import ApiKey
from pybroker.server.request_channel import leave_request_queue, mute_connection
from pybroker.server.quota.manager import NANOS_TO_PERCENTAGE, ClientQuotaManager, QuotaManagers

if TYPE_CHECKING:
    from pybroker.server.context import RequestContext

#: Kafka's ClusterAction requests, answered with sendResponseExemptThrottle
EXEMPT = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN,
                    ApiKey.WRITE_TXN_MARKERS})
HandlerFunc = Callable[["RequestContext", Any], Coroutine[Any, Any, Any]]


@dataclass(slots=True)
class RequestQuota:
    """One request's quota state: who asks, and the largest throttle its handler's quotas set."""

    managers: QuotaManagers
    clock: Clock
    user: str  # sanitized principal name
    client_id: str
    throttle_ms: int = 0
    throttled_by: ClientQuotaManager | None = None
    exempt: bool = False  # from the request quota

    def throttle(self, manager: ClientQuotaManager, throttle_ms: int) -> None:
        if throttle_ms > self.throttle_ms:
            self.throttle_ms, self.throttled_by = throttle_ms, manager


_CURRENT: contextvars.ContextVar[RequestQuota | None] = contextvars.ContextVar("request_quota", default=None)
REQUEST_QUOTA = _CURRENT
"""The current request's quota state (None: no client quota applies): a handler that reads it once skips the
hooks below, each a call, when it is None (every request while no quota is configured)."""


def enforced(api_key: int, func: HandlerFunc) -> HandlerFunc:
    """``func`` run under the client quotas (cluster actions are exempt from the request quota)."""
    exempt = api_key in EXEMPT

    async def handle(ctx: "RequestContext", request: Any) -> Any:
        quotas = getattr(ctx.services, "quotas", None)
        if quotas is None or not quotas.managers.enabled:
            return await func(ctx, request)
        user, client_id = sanitize(ctx.session.principal.name), ctx.client_id or ""
        if not quotas.managers.bounded(user, client_id):
            return await func(ctx, request)
        key = (ctx.listener, ctx.client_host)
        gate = quotas.gates.get(key)
        if gate.closed():
            leave_request_queue()
        async with gate.lock:
            await gate.wait()
            return await _handle(quotas, key, RequestQuota(quotas.managers, quotas.clock, user, client_id, exempt=exempt),
                                 ctx, request)

    async def _handle(quotas: Any, key: tuple[str, str], state: RequestQuota, ctx: "RequestContext",
                      request: Any) -> Any:
        token = _CURRENT.set(state)
        timed = _Timed(func(ctx, request))
        try:
            response = await timed
        finally:
            _CURRENT.reset(token)
        now_ms = quotas.clock.wall_ms()
        request_quota = state.managers.request
        if not state.exempt and request_quota.enabled:
            state.throttle(request_quota, request_quota.record(state.user, state.client_id,
                                                               timed.ns * NANOS_TO_PERCENTAGE, now_ms))
        if state.throttle_ms > 0 and state.throttled_by is not None:
            state.throttled_by.throttled(state.user, state.client_id, state.throttle_ms, now_ms)
            if response is not None and hasattr(response, "throttle_time_ms"):
                response.throttle_time_ms = max(response.throttle_time_ms or 0, state.throttle_ms)
            quotas.gates.mute(key, state.throttle_ms / 1000)
            mute_connection(state.throttle_ms / 1000)
        return response

    return handle


class _Timed:
    """Awaits a coroutine step by step, adding up the time its own steps run (``ns``)."""

    __slots__ = ("_coro", "ns")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.ns = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.ns += time.perf_counter_ns() - started
                return stop.value
            finally:
                error = None
            self.ns += time.perf_counter_ns() - started
            try:
                value = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation thrown into the task goes to the handler
                error, value = exc, None


# Hooks for the handlers


def record_produce(acks: int, size: int, now_ms: int) -> None:
    """Produce: the request's size (header and all, as Kafka's request.sizeInBytes) goes to
    producer_byte_rate (acks=0 is exempt from the request quota, as in Kafka, but not from the byte rate)."""
    state = _CURRENT.get()
    if state is None:
        return
    if acks == 0:
        state.exempt = True
    produce = state.managers.produce
    state.throttle(produce, produce.record(state.user, state.client_id, size, now_ms))


def fetch_max_bytes(follower: bool) -> float:
    """A consumer's fetch reads at most what one quota window allows (Kafka's maxQuotaWindowBytes)."""
    state = _CURRENT.get()
    if state is None or follower:
        return float("inf")
    return state.managers.fetch.max_value_in_window(state.user, state.client_id, state.clock.wall_ms())


def record_fetch(follower: bool, size: int) -> int:
    """Fetch: a consumer's response bytes go to consumer_byte_rate; followers are not measured and
    are exempt from the request quota. Returns the throttle time: the caller then answers empty,
    and the bytes are taken back, as Kafka does (the request quota is recorded after the handler,
    so only a byte-rate throttle empties the answer here)."""
    state = _CURRENT.get()
    if state is None:
        return 0
    if follower:
        state.exempt = True
        return 0
    fetch = state.managers.fetch
    now_ms = state.clock.wall_ms()
    throttle_ms = fetch.record(state.user, state.client_id, size, now_ms)
    if throttle_ms > 0:
        fetch.unrecord(state.user, state.client_id, size, now_ms)
        state.throttle(fetch, throttle_ms)
    return throttle_ms


class MutationQuota:
    """A request's controller_mutation_rate, strict or permissive by version (Kafka's newQuotaFor)."""

    def __init__(self, strict: bool) -> None:
        self._state = _CURRENT.get()
        self._strict = strict
        self.throttle_ms = 0

    def admit(self, partitions: int, now_ms: int) -> bool:
        """Take ``partitions`` mutations; False (refuse with THROTTLING_QUOTA_EXCEEDED) when a strict
        quota is already exhausted."""
        state = self._state
        if state is None or not state.managers.controller_mutation.enabled:
            return True
        manager = state.managers.controller_mutation
        if self._strict:
            exhausted = manager.exhausted_ms(state.user, state.client_id, now_ms)
            if exhausted > 0:
                self._throttled(exhausted)
                return False
        throttle_ms = manager.record(state.user, state.client_id, partitions, now_ms)
        if not self._strict:  # a strict quota throttles only the mutations it refuses
            self._throttled(throttle_ms)
        return True

    def _throttled(self, throttle_ms: int) -> None:
        if throttle_ms > 0 and self._state is not None:
            self.throttle_ms = max(self.throttle_ms, throttle_ms)
            self._state.throttle(self._state.managers.controller_mutation, throttle_ms)
