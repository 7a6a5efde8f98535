"""One TCP connection to one broker: asyncio streams around :class:`ClientWire`.

Opening a connection negotiates API versions first (ApiVersions v3, falling back as KIP-511
describes), so every later request is sent at the highest version both sides speak.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from typing import TypeVar

from pybroker.client.errors import KafkaConnectionError, KafkaTimeoutError, check
from pybroker.client.sasl import SaslCredentials, authenticate
from pybroker.client.versions import NegotiatedVersions, VersionRange, api_name, client_versions
from pybroker.client.wire import ClientWire, Response
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.errors import ProtocolError
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from pybroker.protocol.schema import Message

M = TypeVar("M", bound=Message)

API_VERSIONS_FIRST_TRY = 3
SOFTWARE_NAME = "pybroker"
READ_CHUNK = 256 * 1024


class Connection:
    """Requests to one broker; responses are matched to callers by correlation id."""

    def __init__(self, host: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 client_id: str | None, request_timeout: float) -> None:
        self.host = host
        self.port = port
        self.request_timeout = request_timeout
        self.versions = NegotiatedVersions({}, {})
        self._reader = reader
        self._writer = writer
        self._wire = ClientWire(client_id)
        self._waiters: dict[int, asyncio.Future[Response]] = {}
        self._closed: KafkaConnectionError | None = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    async def open(cls, host: str, port: int, *, tls: ssl.SSLContext | None = None,
                   client_id: str | None = "pybroker",
                   timeout: float = 30.0, sasl: SaslCredentials | None = None) -> Connection:
        """Connect, negotiate versions and authenticate (with ``sasl``), all within ``timeout`` seconds."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=tls), timeout)
        except asyncio.TimeoutError:
            raise KafkaTimeoutError(f"Timed out after {timeout * 1000:.0f} ms connecting to {host}:{port}") from None
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno and not isinstance(exc, (socket.gaierror, ssl.SSLError)) \
                else str(exc)
            raise KafkaConnectionError(f"Cannot connect to {host}:{port}: {reason}") from exc
        connection = cls(host, port, reader, writer, client_id, timeout)
        try:
            await connection._negotiate()
            if sasl is not None:
                await authenticate(connection, sasl)
        except BaseException:
            await connection.close()
            raise
        return connection

    async def _negotiate(self) -> None:
        request = ApiVersionsRequest(client_software_name=SOFTWARE_NAME, client_software_version=_software_version())
        version = API_VERSIONS_FIRST_TRY
        response = await self.send_at(request, version, ApiVersionsResponse)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            advertised = {k.api_key: k.max_version for k in response.api_keys}
            version = min(advertised.get(ApiVersionsRequest.API_KEY, 0), API_VERSIONS_FIRST_TRY - 1)
            response = await self.send_at(request, version, ApiVersionsResponse)
        check(response.error_code)
        broker = {k.api_key: VersionRange(k.min_version, k.max_version) for k in response.api_keys}
        self.versions = NegotiatedVersions.from_broker(broker, client_versions())

    async def send(self, request: Message, response_type: type[M], *, min_version: int = 0,
                   timeout: float | None = None) -> M:
        """Send at the negotiated version of the request's API and wait for its response."""
        version = self.versions.version_for(request.API_KEY, min_version)
        return await self.send_at(request, version, response_type, timeout=timeout)

    async def send_at(self, request: Message, version: int, response_type: type[M], *,
                      timeout: float | None = None) -> M:
        """Send at an explicit version (ApiVersions itself, tests) and wait for the response."""
        if self._closed is not None:
            raise self._closed
        correlation_id, frame = self._wire.encode_request(request, version)
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiters[correlation_id] = waiter
        limit = self.request_timeout if timeout is None else timeout
        try:
            self._writer.write(frame)
            await asyncio.wait_for(waiter, limit)
        except asyncio.TimeoutError:
            self._wire.abandon(correlation_id)
            raise KafkaTimeoutError(f"Timed out after {limit * 1000:.0f} ms waiting for a response to "
                                    f"{api_name(request.API_KEY)} v{version} from {self.address}") from None
        finally:
            self._waiters.pop(correlation_id, None)
        message = waiter.result().message
        if not isinstance(message, response_type):
            raise TypeError(f"expected {response_type.__name__}, got {type(message).__name__}")
        return message

    async def send_without_response(self, request: Message, *, min_version: int = 0) -> None:
        """Send at the negotiated version when no answer will come (Produce with acks=0)."""
        if self._closed is not None:
            raise self._closed
        version = self.versions.version_for(request.API_KEY, min_version)
        _, frame = self._wire.encode_request(request, version, expect_response=False)
        self._writer.write(frame)
        await self._writer.drain()

    async def _read_loop(self) -> None:
        reason = "connection closed by the broker"
        try:
            while chunk := await self._reader.read(READ_CHUNK):
                for response in self._wire.receive(chunk):
                    waiter = self._waiters.get(response.correlation_id)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(response)
        except ProtocolError as exc:
            reason = f"bad response stream: {exc}"
        except OSError as exc:
            reason = f"connection error: {exc}"
        self._fail(KafkaConnectionError(f"Connection to {self.address} lost: {reason}"))
        self._writer.close()

    def _fail(self, error: KafkaConnectionError) -> None:
        if self._closed is None:
            self._closed = error
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(self._closed)

    async def close(self) -> None:
        self._fail(KafkaConnectionError(f"Connection to {self.address} was closed"))
        self._read_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._read_task
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def _software_version() -> str:
    from importlib import metadata  # (email, csv, zipfile: loaded at the first connection, not by every broker)

    try:
        return metadata.version(SOFTWARE_NAME)
    except metadata.PackageNotFoundError:
        return "unknown"
