"""The listener: accepts connections within Kafka's connection quotas and closes the idle and the slow.

Kafka's rules (SocketServer's Acceptor and ConnectionQuotas, KIP-402):

- ``max.connections``: at the limit the broker stops accepting (new clients wait in the listen
  backlog) until a connection closes;
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides`` (``host:count,...``): a
  connection past its address's limit is accepted and closed at once;
- KIP-612's connection creation rates (``connection_rates.py``): past ``max.connection.creation.rate``
  (broker or listener) the acceptor waits; past an address's ``connection_creation_rate`` quota the
  connection is closed, unserved, after the throttle time;
- ``socket.receive.buffer.bytes`` is set on the listening socket (so accepted sockets inherit it
  before the TCP handshake fixes the window scale), ``socket.send.buffer.bytes`` on each accepted
  socket; -1 keeps the OS default;
- ``connections.max.idle.ms``: a connection without traffic is closed.

pybroker adds ``request.receive.timeout.ms`` (Kafka has no such bound): a slow client cannot hold a
half-received request, or a connection without a first request, for longer. Both clocks are checked
by one periodic sweep, so the request path only sets a flag. Refusals and closes are counted per
config key in ``refused`` and ``closed`` for ``/metrics``.

Every listener of ``listeners`` is bound; the quotas and the request queue are shared by all. Each
connection carries a `ConnectionSession` naming its listener, so answers advertise that listener's
endpoints. On SSL and SASL_SSL listeners the TLS handshake runs in its own task (the accept loop
never waits for a client's handshake) and is bounded by ``request.receive.timeout.ms`` and
``connections.max.idle.ms``, whichever is shorter: the sweep only sees connections whose handshake
finished. A TLS connection sends its file ranges through the TLS transport (no zero-copy), and on an
SSL listener its principal comes from the client certificate (`security.principal`); a name no
mapping rule matches fails the authentication and closes the connection, as in Kafka.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import resource
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pybroker.common.clock import Clock
from pybroker.common.config import BrokerConfig, ConfigError
from pybroker.common.listeners import Endpoint
from pybroker.common.log_limit import LogLimiter
from pybroker.security.principal import NoMatchingRule, PrincipalMapper
from pybroker.server.connection_rates import ConnectionRates
from pybroker.server.context import ConnectionSession
from pybroker.server.network import KafkaConnection
from pybroker.server.request_channel import RequestQueue

if TYPE_CHECKING:
    from pybroker.server.dispatcher import Dispatcher

log = logging.getLogger("pybroker.network")
limited_log = LogLimiter(log)

BACKLOG = 1024
MAX_SWEEP_INTERVAL_S = 1.0


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    max_per_ip: int
    per_ip_overrides: dict[str, int]
    send_buffer: int
    receive_buffer: int
    idle_s: float
    receive_s: float

    @classmethod
    def from_config(cls, config: BrokerConfig) -> "ConnectionLimits":
        return cls(config["max.connections"], config["max.connections.per.ip"],
                   parse_overrides(config["max.connections.per.ip.overrides"]),
                   config["socket.send.buffer.bytes"], config["socket.receive.buffer.bytes"],
                   config["connections.max.idle.ms"] / 1000, config["request.receive.timeout.ms"] / 1000)

    def for_ip(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_per_ip)


def parse_overrides(text: str) -> dict[str, int]:
    """``host:count,...`` with every address each host resolves to (Kafka's InetAddress.getByName)."""
    limits: dict[str, int] = {}
    for item in filter(None, (entry.strip() for entry in text.split(","))):
        host, _, count = item.rpartition(":")
        if not host or not count.strip().isdigit():
            raise ConfigError(f"Invalid value {text} for configuration max.connections.per.ip.overrides: "
                              f"expected host:count, got {item!r}")
        host = host.strip("[]")
        try:
            addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        except OSError as exc:
            raise ConfigError(f"Invalid value {text} for configuration max.connections.per.ip.overrides: "
                              f"cannot resolve {host}: {exc}") from None
        for address in addresses:
            limits[address] = int(count)
    return limits


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener to bind: where and with which protocol; for TLS its context and principal rules."""

    endpoint: Endpoint
    tls: ssl.SSLContext | None = None
    principals: PrincipalMapper | None = None
    sasl_max_receive_size: int | None = None  # frames before SASL authentication (sasl.server.max.receive.size)


class SocketServer:
    """The listeners' sockets and the bounds shared by all their connections."""

    def __init__(self, config: BrokerConfig, dispatcher: "Dispatcher", clock: Clock) -> None:
        self.limits = ConnectionLimits.from_config(config)
        self._clock = clock  # the connection creation rates are measured on it
        self.rates = ConnectionRates(config)
        self.queue = RequestQueue(config["queued.max.requests"], config["queued.max.request.bytes"])
        self.connections: set[KafkaConnection] = set()
        self.open_count = 0  # counted at accept, before the transport exists, as the quotas are
        self.per_ip: collections.Counter[str] = collections.Counter()
        self.refused: collections.Counter[str] = collections.Counter()
        self.closed: collections.Counter[str] = collections.Counter()
        self._dispatcher = dispatcher
        self._max_frame_size = config["socket.request.max.bytes"]
        self._max_in_flight = config["queued.max.requests.per.connection"]
        self._listeners: list[socket.socket] = []
        self._slot_freed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self._throttled: set[socket.socket] = set()  # closed once their address's throttle time has passed
        self._spare = SpareDescriptor()

    def start(self, spec: ListenerSpec) -> int:
        """Bind and listen on every address the listener's host resolves to (as asyncio's create_server;
        an empty host is every interface); return the port."""
        host, port = spec.endpoint.host or "0.0.0.0", spec.endpoint.port
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        loop = asyncio.get_running_loop()
        first = len(self._listeners)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            listener = socket.socket(family, kind, proto)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if self.limits.receive_buffer != -1:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.limits.receive_buffer)
            if len(self._listeners) > first:  # an ephemeral port: every address gets the first one's
                address = (address[0], self._listeners[first].getsockname()[1], *address[2:])
            try:
                listener.bind(address)
            except OSError as exc:  # Kafka's SocketServer words it so; the caller logs one line and exits
                listener.close()
                raise OSError(exc.errno, f"Socket server failed to bind to {host}:{port}: {exc.strerror}.") from None
            listener.listen(BACKLOG)
            listener.setblocking(False)
            self._listeners.append(listener)
            self._tasks.append(loop.create_task(self._accept_loop(listener, spec),
                                                name=f"acceptor-{spec.endpoint.listener}"))
        if not first:
            self._tasks.append(loop.create_task(self._sweep_loop(), name="connection-sweeper"))
        return int(self._listeners[first].getsockname()[1])

    async def stop(self) -> None:
        for task in (*self._tasks, *self._handshakes):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._handshakes, return_exceptions=True)
        for listener in self._listeners:
            listener.close()
        for sock in self._throttled:
            sock.close()
        for connection in list(self.connections):
            connection.close()
        self._spare.close()

    # Accepting

    async def _accept_loop(self, listener: socket.socket, spec: ListenerSpec) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self.open_count >= self.limits.max_connections:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            try:
                sock, address = await loop.sock_accept(listener)
            except OSError as exc:
                if not self._spare.shed(listener, exc):  # back off instead of spinning
                    limited_log.warning("accept-failed", "Accepting a connection failed: %s", exc)
                    await asyncio.sleep(0.1)
                continue
            ip = address[0]
            if not await self._within_creation_rates(sock, ip, spec):
                continue
            limit = self.limits.for_ip(ip)
            if self.per_ip[ip] >= limit:
                self.refused["max.connections.per.ip"] += 1
                limited_log.log(logging.INFO, "per-ip-limit", "Rejected connection from %s, address already has "
                                "the configured maximum of %d connections.", ip, limit)
                sock.close()
                continue
            self.open_count += 1
            self.per_ip[ip] += 1
            if spec.tls is None:
                await self._connect(sock, ip, spec)
            else:
                task = loop.create_task(self._connect(sock, ip, spec), name="tls-handshake")
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)

    async def _within_creation_rates(self, sock: socket.socket, ip: str, spec: ListenerSpec) -> bool:
        """KIP-612: wait out the broker's and the listener's max.connection.creation.rate; False (the
        socket closed later, after its throttle time) past the address's connection_creation_rate."""
        loop = asyncio.get_running_loop()
        listener = spec.endpoint.listener
        delay_ms = self.rates.accept_delay_ms(listener, int(self._clock.monotonic() * 1000))
        if delay_ms:
            self.refused["max.connection.creation.rate"] += 1  # delayed, not refused: counted with them
            await self._clock.sleep(delay_ms / 1000)
        throttle_ms = self.rates.ip_throttle_ms(ip, listener, int(self._clock.monotonic() * 1000))
        if not throttle_ms:
            return True
        self.refused["connection_creation_rate"] += 1
        limited_log.log(logging.INFO, "ip-creation-rate", "Throttled a connection from %s for %d ms: the address "
                        "is past its connection_creation_rate quota.", ip, throttle_ms)
        self._throttled.add(sock)
        loop.call_later(throttle_ms / 1000, self._close_throttled, sock)
        return False

    def _close_throttled(self, sock: socket.socket) -> None:
        self._throttled.discard(sock)
        sock.close()

    async def _connect(self, sock: socket.socket, ip: str, spec: ListenerSpec) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.limits.send_buffer != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.limits.send_buffer)
            if spec.tls is None:
                await loop.connect_accepted_socket(lambda: self._new_connection(ip, spec), sock)
            else:
                await loop.connect_accepted_socket(lambda: self._new_connection(ip, spec), sock, ssl=spec.tls,
                                                   ssl_handshake_timeout=min(self.limits.idle_s,
                                                                             self.limits.receive_s))
        except (OSError, asyncio.TimeoutError) as exc:  # gone already, or a failed or unfinished handshake
            if spec.tls is not None:
                self.closed["ssl.handshake"] += 1
                limited_log.log(logging.INFO, "tls-handshake", "Failed authentication with %s (SSL handshake "
                                "failed on listener %s: %s)", ip, spec.endpoint.listener, exc or type(exc).__name__)
            else:
                log.debug("Dropping connection from %s: %s", ip, exc)
            sock.close()
            self.connection_closed(ip)

    def _new_connection(self, ip: str, spec: ListenerSpec) -> KafkaConnection:
        session = ConnectionSession(spec.endpoint.listener, spec.endpoint.security_protocol)
        limit = spec.sasl_max_receive_size
        return _TrackedConnection(self, ip, spec, self._dispatcher, session=session,
                                  max_frame_size=self._max_frame_size, max_in_flight=self._max_in_flight,
                                  connections=self.connections, queue=self.queue, zero_copy=spec.tls is None,
                                  frame_limit=None if limit is None else lambda: _pre_authentication(session, limit))

    def connection_closed(self, ip: str) -> None:
        self.open_count -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]
        self._slot_freed.set()

    # Idle and slow connections

    async def _sweep_loop(self) -> None:
        limits = self.limits
        interval = min(MAX_SWEEP_INTERVAL_S, limits.idle_s / 4, limits.receive_s / 4)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for connection in list(self.connections):
                reason = connection.expired(now, limits.idle_s, limits.receive_s)
                if reason is not None:
                    self.closed[reason] += 1
                    limited_log.log(logging.INFO, reason, "Closing connection from %s: %s passed", connection.peer,
                                    reason)
                    connection.close()


class SpareDescriptor:
    """One descriptor held in reserve, as servers do (an open ``/dev/null``): out of descriptors, accept()
    fails with EMFILE and the connection would wait in the listen backlog until the broker is restarted;
    the spare is closed for the moment it takes to accept the newest connection and close it (shed, with a
    log line), and taken again, so clients get an answer (a closed connection) and the listener goes on."""

    def __init__(self) -> None:
        self._fd = self._take()

    @staticmethod
    def _take() -> int | None:
        try:
            return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    def shed(self, listener: socket.socket, error: OSError) -> bool:
        """After ``error`` from accepting on ``listener``: True if it was EMFILE/ENFILE and a connection was
        shed, False when the caller should back off."""
        if error.errno not in (errno.EMFILE, errno.ENFILE) or self._fd is None:
            self._fd = self._fd if self._fd is not None else self._take()
            return False
        os.close(self._fd)
        try:
            sock, address = listener.accept()
        except OSError:
            return False
        finally:
            self._fd = self._take()
        sock.close()
        limited_log.warning("shed", "Shedding connection from %s: the broker is out of open files (RLIMIT_NOFILE "
                            "%d)", address[0], resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _pre_authentication(session: ConnectionSession, limit: int) -> int | None:
    """A SASL connection's frame limit: ``sasl.server.max.receive.size`` until it authenticated, so a
    client that has not logged in cannot make the broker buffer a socket.request.max.bytes frame."""
    return None if session.sasl is not None and session.sasl.authenticated else limit


class _TrackedConnection(KafkaConnection):
    """A connection that gives its quota back to the socket server when it closes, and on an SSL
    listener takes its principal from the client's certificate once the handshake is done."""

    session: ConnectionSession

    def __init__(self, server: SocketServer, ip: str, spec: ListenerSpec, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._server = server
        self._ip = ip
        self._spec = spec

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._spec.principals is None or self.session.security_protocol != "SSL":
            return
        ssl_object = transport.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        try:
            self.session.principal = self._spec.principals.principal(certificate)
        except (NoMatchingRule, ValueError) as exc:
            self._server.closed["ssl.principal.mapping.rules"] += 1
            limited_log.log(logging.INFO, "tls-principal", "Failed authentication with %s (%s)", self.peer, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._server.connection_closed(self._ip)
