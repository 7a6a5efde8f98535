"""Routes a request frame to its handler and frames the handler's answer.

Kafka's rules for requests it cannot serve: an ApiVersions request at a version we do not know
gets a v0-encoded UNSUPPORTED_VERSION answer listing our range for key 18 (KIP-511); any other
unknown API key or version closes the connection (SocketServer.parseRequestHeader's
UnsupportedVersionException). Either is logged once per client, with what the broker serves. Requests only brokers send pass the
`InterBrokerGuard` first; a refused one gets its API's error answer and never reaches the handler.
"""

from __future__ import annotations

import asyncio
import logging
import time
import types
from typing import Any, Coroutine, Iterable

from pybroker.common.clock import SystemClock
from pybroker.common.config import BrokerConfig
from pybroker.common.io_executor import IoExecutor
from pybroker.common.log_limit import LogLimiter
from pybroker.protocol import hot_codecs
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import decode_request_header_fields, encode_response, encode_response_parts
from pybroker.protocol.messages import ApiVersionsResponse
from pybroker.protocol.primitives import Reader
from pybroker.protocol.schema import Read, decode_budget, get_plan, use_typed_codecs
from pybroker.server import sasl_gate
from pybroker.server.sasl_session import SASL_PROTOCOLS
from pybroker.server.context import ConnectionSession, RequestContext
from pybroker.server.inter_broker_guard import GUARDED, InterBrokerGuard, refusal
from pybroker.server.metrics import request_name
from pybroker.server.request_channel import CloseConnection, FinalResponse, Response
from pybroker.server.registry import ApiHandler
from pybroker.server.services import Services

CONSUMER_PROTOCOL_APIS = frozenset({ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE})
"""Served and advertised only while group.coordinator.rebalance.protocols lists "consumer"."""

log = logging.getLogger("pybroker.server")
limited_log = LogLimiter(log)
MAX_UNSUPPORTED_CLIENTS = 1024
"""Clients whose unsupported versions were reported, remembered so each is reported once (oldest forgotten)."""


_COROUTINE = types.CoroutineType
_FETCH = ApiKey.FETCH  # read once: on Python 3.11 an Enum class's attribute goes through EnumType.__getattr__'s slot

Route = tuple[ApiHandler, Read, int]
"""A served (API key, version): its handler, the generated reader of its request and the request's decode budget."""


def _route(handler: ApiHandler, version: int) -> Route:
    """Every handler serves versions its request class has (test_registry checks it), so the version is the
    codec's to read without Message.read's range check."""
    cls = handler.request_class
    # A class object is hashable; mypy checks type[Message] against its instances' __hash__ (python/mypy#11470).
    return handler, get_plan(cls, version).read, decode_budget(cls)  # type: ignore[arg-type]


def served_handlers(config: BrokerConfig, handlers: Iterable[ApiHandler]) -> dict[int, ApiHandler]:
    """The handlers this broker's config serves, by API key."""
    consumer_protocol = "consumer" in config["group.coordinator.rebalance.protocols"]
    return {handler.api_key: handler for handler in handlers
            if consumer_protocol or handler.api_key not in CONSUMER_PROTOCOL_APIS}


class Dispatcher:
    def __init__(self, services: Services, handlers: dict[int, ApiHandler]):
        use_typed_codecs(hot_codecs.codecs)  # before any route: the Fetch and Produce requests it reads most
        self._services = services
        self.handlers = handlers
        self._guard = InterBrokerGuard(services.clock)
        self._routes: dict[tuple[int, int], Route] = {}
        self._unsupported_seen: dict[tuple[str | None, str, int], None] = {}  # reported (client, host, API)
        self._started = False
        # its wall_ms read inline: a call fewer per request (the broker has its own SystemClock, not SYSTEM_CLOCK)
        self._system_clock = type(services.clock) is SystemClock

    @property
    def io(self) -> IoExecutor:
        """The broker's I/O pool: connections read cold file ranges of responses there."""
        return self._services.io

    def dispatch(self, frame: memoryview, peer: str, session: ConnectionSession | None = None,
                 after_sasl_gate: bool = False) -> Response | Coroutine[Any, Any, Response]:
        """The request's answer, or a coroutine that answers it. While nothing else needs a coroutine (no SASL
        exchange, no inter-broker check, start-up over, no quota, no metrics), a handler with a first step of its own
        (`ApiHandler.immediate`) is called here, so that a request it answers at once, as most fetches are, is
        answered with no coroutine at all, and any other handler's coroutine is only wrapped to encode its answer;
        the connection runs any coroutine's first step at once.
        ``after_sasl_gate``: called again by `_dispatch_sasl` once the SASL gate let the request through."""
        if session is not None and not after_sasl_gate and session.security_protocol in SASL_PROTOCOLS:
            return self._dispatch_sasl(frame, peer, session)
        key, version, correlation_id, client_id, body_offset = decode_request_header_fields(frame)
        route = self._routes.get((key, version))
        if route is None:
            handler = self.handlers.get(key)
            if handler is None:
                raise CloseConnection(f"unsupported API key {key}")
            if not handler.min_version <= version <= handler.max_version:
                self._report_unsupported(client_id, peer, handler, version)
                if key == ApiKey.API_VERSIONS:
                    return self._unsupported_api_versions(correlation_id)
                raise CloseConnection(f"unsupported version {version} of {request_name(key)} (key {key})",
                                      logged=True)
            route = self._routes[(key, version)] = _route(handler, version)
        handler, read, budget = route
        request = read(Reader(frame, body_offset, budget))  # from the body's offset: no view of the body made
        services = self._services
        context = RequestContext(services, version, correlation_id, client_id, peer,
                                 time.time_ns() // 1_000_000 if self._system_clock else services.clock.wall_ms(),
                                 session if session is not None else ConnectionSession(), len(frame))
        if not self._started:  # start-up ends once: after it, no request asks the event again
            self._started = services.serving.is_set()
        if not self._started or key in GUARDED or context.session.sasl is not None or services.metrics is not None \
                or services.quotas.managers.enabled:
            return self._handle(handler, key, request, context)
        immediate = handler.immediate
        if immediate is None:  # the handler's coroutine, encoded when it is done
            return self._encode_later(handler.unbounded(context, request), key, context)
        response = immediate(context, request)
        if type(response) is _COROUTINE:
            return self._encode_later(response, key, context)
        if response is None:
            return None
        parts = encode_response_parts(correlation_id, key, version, response)
        return FinalResponse(parts) if context.session.close_after_response else parts

    async def _dispatch_sasl(self, frame: memoryview, peer: str, session: ConnectionSession) -> Response:
        answer = await sasl_gate.before_header(self._services.sasl, session, frame, peer)
        if answer is not None:
            return answer
        outcome = self.dispatch(frame, peer, session, True)
        return await outcome if isinstance(outcome, Coroutine) else outcome

    async def _encode_later(self, outcome: Coroutine[Any, Any, Any], key: int, context: RequestContext) -> Response:
        response = await outcome
        if response is None:
            return None
        parts = encode_response_parts(context.correlation_id, key, context.api_version, response)
        return FinalResponse(parts) if context.session.close_after_response else parts

    async def _handle(self, handler: ApiHandler, key: int, request: Any, context: RequestContext) -> Response:
        """The request from the SASL and inter-broker checks on, with the quotas and metrics."""
        version, correlation_id, session = context.api_version, context.correlation_id, context.session
        if session.sasl is not None and (sasl_refusal := sasl_gate.refusal(session, key, version, request,
                                                                            context.now_ms)):
            return FinalResponse(encode_response_parts(correlation_id, key, version, sasl_refusal))
        if key not in GUARDED:
            # Until start-up finished: ApiVersions (stateless, every connection's first) and the SASL
            # exchange are answered, controller requests wait for the registration only, the others
            # for the metadata.
            if not self._started and key not in sasl_gate.BEFORE_START_UP:  # (`dispatch` asked the event)
                await self._services.serving.wait()
        elif not await self._guard.check(context, request):
            limited_log.warning(f"refused-{key}", "Refused %s from %s on listener %s (client id %s)",
                                type(request).__name__, context.client_host, session.listener, context.client_id)
            await self._services.clock.sleep(self._services.sasl.failed_delay_ms / 1000)  # each guess costs a delay
            return FinalResponse(encode_response_parts(correlation_id, key, version, refusal(request)))
        metrics = self._services.metrics
        handle = handler.handle if self._services.quotas.managers.enabled else handler.unbounded
        if metrics is None:
            response = await handle(context, request)
        else:
            started = time.perf_counter()
            try:
                response = await handle(context, request)
            finally:
                metrics.observe_request(key, version, started)
            if key == _FETCH and response is not None:
                metrics.record_fetch(version, request, response)
        if response is None:
            return None
        parts = encode_response_parts(correlation_id, key, version, response)
        return FinalResponse(parts) if session.close_after_response else parts

    def _report_unsupported(self, client_id: str | None, peer: str, handler: ApiHandler, version: int) -> None:
        """One warning per client (client id and address) and API: what it asked for and what is served. Kafka
        logs the disconnect only, and the client then often blames something else (a SASL setting)."""
        host = peer.rpartition(":")[0] or peer
        seen = (client_id, host, handler.api_key)
        if seen in self._unsupported_seen:
            return
        self._unsupported_seen[seen] = None
        if len(self._unsupported_seen) > MAX_UNSUPPORTED_CLIENTS:
            del self._unsupported_seen[next(iter(self._unsupported_seen))]
        name = request_name(handler.api_key)
        served = f"{name} v{handler.min_version} to v{handler.max_version}"
        if handler.api_key == ApiKey.API_VERSIONS:
            outcome = "answered UNSUPPORTED_VERSION with the served range (KIP-511), so the client can retry lower"
        else:
            outcome = "closing the connection, as Kafka does (the client is too old or pins an old API version)"
        log.warning("Client %r from %s sent %s v%d, which this broker does not serve (it serves %s): %s",
                    client_id, peer, name, version, served, outcome)

    def _unsupported_api_versions(self, correlation_id: int) -> bytes:
        own = self.handlers[ApiKey.API_VERSIONS]
        response = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[ApiVersionsResponse.ApiVersion(api_key=own.api_key, min_version=own.min_version,
                                                     max_version=own.max_version)],
        )
        return encode_response(correlation_id, ApiKey.API_VERSIONS, 0, response.encode(0))
