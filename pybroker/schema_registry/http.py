"""A small HTTP/1.1 server on the broker's event loop (h11 parses; this module bounds everything).

Hostile input never costs more than its limits: headers past 16 KiB, a body past ``max_body_bytes``, a
request not received within ``request_timeout_s`` or a connection idle past ``idle_timeout_s`` close
the connection (after a 4xx answer where HTTP allows one); past ``max_connections`` new ones are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass, field
from typing import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import h11

log = logging.getLogger("pybroker.schema_registry")
MAX_HEADER_BYTES = 16384
READ_CHUNK = 65536


@dataclass(slots=True)
class Request:
    method: str
    path: str  # as sent: percent-escapes undone per segment by the router
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    peer: str = ""
    user: str | None = None  # set by authentication

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        return (self.param(name) or "").lower() == "true"


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/vnd.schemaregistry.v1+json"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]


class HttpServer:
    def __init__(self, handler: Handler, *, max_body_bytes: int, request_timeout_s: float = 30.0,
                 idle_timeout_s: float = 600.0, max_connections: int = 1000,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.max_body_bytes = max_body_bytes
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self.ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._accept, host or None, port, ssl=self.ssl_context,
                                                  ssl_handshake_timeout=self.request_timeout_s
                                                  if self.ssl_context else None)
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.max_connections:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError, asyncio.TimeoutError):
            pass
        except Exception:
            log.exception("Schema registry connection failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        peer = writer.get_extra_info("peername")
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        while True:
            try:
                request = await self._receive(connection, reader, peer_text)
            except _Reject as reject:
                if connection.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(connection, writer, reject.response, close=True)
                return
            if request is None:
                return
            try:
                response = await self.handler(request)
            except Exception:
                log.exception("Schema registry request %s %s failed", request.method, request.path)
                response = Response(500, b'{"error_code":500,"message":"Internal Server Error"}')
            keep = await self._send(connection, writer, response, close=False)
            if not keep or connection.our_state is h11.MUST_CLOSE:
                return
            try:
                connection.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _receive(self, connection: h11.Connection, reader: asyncio.StreamReader,
                       peer: str) -> Request | None:
        head: h11.Request | None = None
        body = bytearray()
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise _Reject(_error(exc.error_status_hint, f"Bad request: {exc}")) from None
            if event is h11.NEED_DATA:
                timeout = self.idle_timeout_s if deadline is None else deadline - loop.time()
                if timeout <= 0:
                    raise _Reject(_error(408, "Request timeout"))
                try:
                    data = await asyncio.wait_for(reader.read(READ_CHUNK), timeout)
                except (asyncio.TimeoutError, TimeoutError):
                    if deadline is None:
                        return None  # an idle keep-alive connection
                    raise _Reject(_error(408, "Request timeout")) from None
                if deadline is None:
                    deadline = loop.time() + self.request_timeout_s
                connection.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                head = event
                declared = dict(event.headers).get(b"content-length")
                if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                    raise _Reject(_error(413, f"Request body larger than {self.max_body_bytes} bytes"))
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body_bytes:
                    raise _Reject(_error(413, f"Request body larger than {self.max_body_bytes} bytes"))
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return _request(head, bytes(body), peer)
            elif isinstance(event, h11.ConnectionClosed):
                return None

    @staticmethod
    async def _send(connection: h11.Connection, writer: asyncio.StreamWriter, response: Response,
                    *, close: bool) -> bool:
        headers = [("content-type", response.content_type), ("content-length", str(len(response.body))),
                   *response.headers]
        if close:
            headers.append(("connection", "close"))
        try:
            data = connection.send(h11.Response(status_code=response.status, headers=headers))
            data += connection.send(h11.Data(data=response.body)) if response.body else b""
            data += connection.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return False
        writer.write(data)
        await writer.drain()
        return not close


class _Reject(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _error(status: int, message: str) -> Response:
    import json

    return Response(status, json.dumps({"error_code": status, "message": message}).encode())


def _request(head: h11.Request, body: bytes, peer: str) -> Request:
    target = head.target.decode("latin-1")
    parts = urlsplit(target)
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in head.headers}
    return Request(head.method.decode("ascii", "replace").upper(), parts.path, parse_qs(parts.query),
                   headers, body, peer)
