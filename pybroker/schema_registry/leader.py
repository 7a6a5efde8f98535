"""One writer in a cluster: the registry of the broker leading partition 0 of ``_schemas``.

The controller elects that leader, as for any partition, so a broker's death moves the registry's
writes along with the partition, after replication has kept every acknowledged record. A follower
forwards a write to the leader's registry (found by broker id: each broker publishes its registry URL)
and answers once its own view has applied the leader's write (the ``X-Schemas-Offset`` the leader
returns), so the client reads what it wrote from any broker. Should two brokers briefly both act as
leader, the log decides: the first record for an id or a subject version wins in every view, and the
loser tries again (registry.py).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Awaitable, Callable
from urllib.parse import urlencode, urlsplit

import h11

from pybroker.schema_registry import errors
from pybroker.schema_registry.http import Request, Response

OFFSET_HEADER = "x-schemas-offset"
FORWARDED_HEADER = "x-pybroker-forwarded"
LEADER_WAIT_S = 0.1
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class PartitionLeadership:
    def __init__(self, own_id: int, leader_id: Callable[[], int | None | bool],
                 url_of: Callable[[int], Awaitable[str | None]], ensure_topic: Callable[[], Awaitable[None]],
                 timeout_s: float) -> None:
        self.own_id = own_id
        self.leader_id = leader_id  # None: no leader now; False: no such topic yet
        self.url_of = url_of
        self.ensure_topic = ensure_topic
        self.timeout_s = timeout_s

    async def leader_url(self) -> str | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            leader = self.leader_id()
            if leader is False:
                await self.ensure_topic()
                leader = self.leader_id()
            if leader == self.own_id:
                return None
            if isinstance(leader, int) and not isinstance(leader, bool):
                url = await self.url_of(leader)
                if url is not None:
                    return url
            if loop.time() > deadline:
                raise errors.unknown_leader(f"No schema registry leader: partition 0 of _schemas has "
                                            f"{'no leader' if leader is None else f'leader {leader} without a registry'}")
            await asyncio.sleep(LEADER_WAIT_S)


async def forward(url: str, request: Request, *, timeout_s: float, tls: ssl.SSLContext | None = None) -> Response:
    """Sends ``request`` to the leader's registry as is (its credentials included) and returns its answer."""
    parts = urlsplit(url)
    target = request.path + (f"?{urlencode(request.query, doseq=True)}" if request.query else "")
    headers = [("host", parts.netloc), ("content-length", str(len(request.body))), ("connection", "close"),
               (FORWARDED_HEADER, "1")]
    for name in ("content-type", "authorization", "accept"):
        if name in request.headers:
            headers.append((name, request.headers[name]))
    try:
        return await asyncio.wait_for(_exchange(parts.hostname or "", parts.port or 80, request.method, target,
                                                headers, request.body, tls if parts.scheme == "https" else None),
                                      timeout_s)
    except (OSError, asyncio.TimeoutError, TimeoutError, h11.ProtocolError, ssl.SSLError) as exc:
        raise errors.forwarding_failed(f"Error while forwarding the request to the leader {url}: "
                                       f"{exc or type(exc).__name__}") from None


async def _exchange(host: str, port: int, method: str, target: str, headers: list[tuple[str, str]], body: bytes,
                    tls: ssl.SSLContext | None) -> Response:
    reader, writer = await asyncio.open_connection(host, port, ssl=tls)
    try:
        connection = h11.Connection(h11.CLIENT)
        data = connection.send(h11.Request(method=method, target=target, headers=headers))
        data += connection.send(h11.Data(data=body)) if body else b""
        data += connection.send(h11.EndOfMessage())
        writer.write(data)
        await writer.drain()
        status, content_type, extra, received = 500, "application/json", [], bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                for name, value in event.headers:
                    if name == b"content-type":
                        content_type = value.decode("latin-1")
                    elif name == OFFSET_HEADER.encode() or name == b"www-authenticate":
                        extra.append((name.decode(), value.decode("latin-1")))
            elif isinstance(event, h11.Data):
                received += event.data
                if len(received) > MAX_RESPONSE_BYTES:
                    raise OSError("the leader's answer is too large")
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return Response(status, bytes(received), content_type, extra)
    finally:
        writer.close()
