"""Sans-IO client side of one connection: encode requests, match response frames to them.

Kafka answers the requests of one connection in order, but we still match by correlation id: it
catches a confused peer, and it lets a timed-out request be abandoned while its late answer is
recognised and dropped instead of being handed to the next caller.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.errors import DecodeError
from pybroker.protocol.frame import API_VERSIONS_KEY, FrameDecoder, decode_response_header, encode_request
from pybroker.protocol import messages
from pybroker.protocol.messages.request_header import RequestHeader
from pybroker.protocol.primitives import BytesLike
from pybroker.protocol.schema import Message

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024
_CORRELATION = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class PendingRequest:
    api_key: int
    api_version: int


@dataclass(frozen=True, slots=True)
class Response:
    correlation_id: int
    api_version: int
    message: Message


def response_class(api_key: int) -> type[Message]:
    """The response class of one API, loading only its module (the full table costs ~0.3 s)."""
    cls: type[Message] = getattr(messages, messages.API_NAMES[api_key] + "Response")
    return cls


class ClientWire:
    """Correlation ids, request frames and response decoding for one connection."""

    def __init__(self, client_id: str | None, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.client_id = client_id
        self._decoder = FrameDecoder(max_frame_size)
        self._next_id = 0
        self._pending: dict[int, PendingRequest] = {}
        self._abandoned: set[int] = set()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def encode_request(self, message: Message, api_version: int, *,
                       expect_response: bool = True) -> tuple[int, bytes]:
        """Frame ``message`` at ``api_version``; return its correlation id and the bytes to send.

        ``expect_response=False`` is for Produce with acks=0, which the broker never answers.
        """
        correlation_id = self._next_id
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        header = RequestHeader(request_api_key=message.API_KEY, request_api_version=api_version,
                               correlation_id=correlation_id, client_id=self.client_id)
        frame = encode_request(header, message, api_version)
        if expect_response:
            self._pending[correlation_id] = PendingRequest(message.API_KEY, api_version)
        return correlation_id, frame

    def abandon(self, correlation_id: int) -> None:
        """Forget a request whose caller gave up; its response, if it ever comes, is dropped."""
        if self._pending.pop(correlation_id, None) is not None:
            self._abandoned.add(correlation_id)

    def receive(self, data: BytesLike) -> list[Response]:
        """Feed received bytes; return the responses they complete. Raise DecodeError on a bad stream."""
        responses = []
        for frame in self._decoder.feed(data):
            if len(frame) < 4:
                raise DecodeError(f"response frame of {len(frame)} bytes has no correlation id")
            (correlation_id,) = _CORRELATION.unpack_from(frame)
            if correlation_id in self._abandoned:
                self._abandoned.discard(correlation_id)
                continue
            pending = self._pending.pop(correlation_id, None)
            if pending is None:
                raise DecodeError(f"response with unknown correlation id {correlation_id}")
            responses.append(self._decode(correlation_id, pending, frame))
        return responses

    @staticmethod
    def _decode(correlation_id: int, pending: PendingRequest, frame: memoryview) -> Response:
        _, offset = decode_response_header(frame, pending.api_key, pending.api_version)
        body = frame[offset:]
        version = pending.api_version
        if pending.api_key == API_VERSIONS_KEY and len(body) >= 2 \
                and _ERROR_CODE.unpack_from(body)[0] == ErrorCode.UNSUPPORTED_VERSION:
            version = 0  # KIP-511: a broker answers a too-new ApiVersions request with a v0 body
        message = response_class(pending.api_key).decode(body, version)
        return Response(correlation_id, version, message)
