"""The registry as the broker runs it: the HTTP listener, the API, the leader check for writes.

Off unless ``schema.registry.listeners`` names a URL (``http://127.0.0.1:8081``; port 0 picks a free one,
logged as the Kafka listener's is). The store starts at the first request that needs it, so a broker
whose registry nobody uses creates no ``_schemas`` topic.
"""

from __future__ import annotations

import json
import logging
import ssl
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol
from urllib.parse import urlsplit

from pybroker.schema_registry import errors, routes
from pybroker.schema_registry.http import HttpServer, Request, Response
from pybroker.schema_registry.leader import FORWARDED_HEADER, OFFSET_HEADER
from pybroker.schema_registry.registry import SchemaRegistry

log = logging.getLogger("pybroker.schema_registry")


class ConfigError(ValueError):
    """``schema.registry.listeners`` names no usable URL."""


@dataclass(frozen=True, slots=True)
class ListenerUrl:
    scheme: str
    host: str
    port: int


def parse_listener(url: str) -> ListenerUrl:
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = None
    if parts.scheme not in ("http", "https") or port is None:
        raise ConfigError(f"Invalid schema.registry.listeners entry {url!r}: expected http://host:port or "
                          "https://host:port (port 0: any free port)")
    return ListenerUrl(parts.scheme, parts.hostname or "", port)


class Leadership(Protocol):
    async def leader_url(self) -> str | None:
        """None when this broker's registry is the leader; else the leader's URL (50004 if none)."""


class SoleLeader:
    """A single broker: its registry is always the leader."""

    async def leader_url(self) -> str | None:
        return None


Authenticator = Callable[[Request], Awaitable[None]]
Forwarder = Callable[[str, Request], Awaitable[Response]]


class SchemaRegistryService:
    def __init__(self, registry: SchemaRegistry, listener: ListenerUrl, *, leadership: Leadership,
                 max_body_bytes: int, ssl_context: ssl.SSLContext | None = None,
                 authenticate: Authenticator | None = None, authorize: Callable[[Request, str], None] | None = None,
                 forward: Forwarder | None = None) -> None:
        self.registry = registry
        self.listener = listener
        self.leadership = leadership
        self.authenticate = authenticate
        self.authorize = authorize
        self.forward = forward
        self.server = HttpServer(self.handle, max_body_bytes=max_body_bytes, ssl_context=ssl_context)
        self.url = ""

    async def start(self) -> str:
        port = await self.server.start(self.listener.host, self.listener.port)
        host = self.listener.host or "0.0.0.0"
        self.url = f"{self.listener.scheme}://{host}:{port}"
        log.info("Schema registry listening on %s", self.url)
        return self.url

    async def close(self) -> None:
        await self.server.close()
        await self.registry.store.close()

    async def handle(self, request: Request) -> Response:
        try:
            if self.authenticate is not None:
                await self.authenticate(request)
            route, args = routes.match(request.method, request.path)
            if self.authorize is not None:
                self.authorize(request, route.operation)
            if route.writes and FORWARDED_HEADER not in request.headers:  # a forwarded write is never sent on
                leader = await self.leadership.leader_url()
                if leader is not None:
                    if self.forward is None:
                        raise errors.unknown_leader("Writes go to the leader, and forwarding is off")
                    return await self._forwarded(leader, request)
            answer = await route.action(self.registry, request, args)
        except errors.RegistryError as exc:
            headers = [("www-authenticate", 'Basic realm="pybroker"')] if exc.status == 401 else []
            return Response(exc.status, _json(exc.body()), headers=headers)
        if isinstance(answer, routes.RawText):
            return Response(200, answer.text.encode())
        written = [(OFFSET_HEADER, str(self.registry.store.position - 1))] if route.writes else []
        return Response(200, _json(answer), headers=written)

    async def _forwarded(self, leader: str, request: Request) -> Response:
        """The leader's answer, once this broker's view holds the write (read-your-writes from here too)."""
        assert self.forward is not None
        response = await self.forward(leader, request)
        offset = next((int(v) for k, v in response.headers if k == OFFSET_HEADER and v.lstrip("-").isdigit()), None)
        if response.status == 200 and offset is not None and offset >= 0:
            await self.registry.store.ensure_started()
            await self.registry.store.wait_for(offset)
        return response


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
