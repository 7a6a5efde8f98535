"""Sans-IO framing: size-prefixed frames, request/response headers.

Nothing here touches sockets or asyncio; a connection handler feeds received
bytes into :class:`FrameDecoder` and writes whatever :func:`encode_response`
returns.  That keeps framing testable byte-for-byte and reusable by clients.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any, Final

from pybroker.protocol.api_keys import FLEXIBLE_MIN, REQUEST_VERSIONS
from pybroker.protocol.errors import DecodeError, EncodeError, FrameTooLarge
from pybroker.protocol.messages.request_header import RequestHeader
from pybroker.protocol.messages.response_header import ResponseHeader
from pybroker.protocol.primitives import BytesLike, FramePart, Reader, Writer
from pybroker.protocol.schema import Message, get_plan

__all__ = [
    "FrameDecoder",
    "request_header_version",
    "response_header_version",
    "decode_request_header",
    "decode_request_header_fields",
    "RequestHeaderFields",
    "decode_response_header",
    "encode_response",
    "encode_response_message",
    "encode_response_parts",
    "encode_request",
    "EncodedBody",
    "API_VERSIONS_KEY",
    "CONTROLLED_SHUTDOWN_KEY",
]

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7

# Final: the compiled build keeps them in C statics rather than looking them up in the module's dict per call.
# The methods the hot paths call are bound once: compiled, ``_SIZE.pack_into(...)`` looks the method up per call.
_SIZE: Final = struct.Struct(">i")
_SIZE_UNPACK_FROM: Final = _SIZE.unpack_from
_SIZE_PACK_INTO: Final = _SIZE.pack_into
_HEADER_V0: Final = struct.Struct(">ii")  # size, correlation id
_HEADER_V1_PACK: Final = struct.Struct(">iiB").pack  # size, correlation id, empty tagged-field section
_HEADER_FIXED: Final = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_HEADER_FIXED_UNPACK_FROM: Final = _HEADER_FIXED.unpack_from
_MEMORYVIEW: Final = memoryview  # compiled, looked up in the builtins module at each use otherwise
_HEADER_FIXED_SIZE: Final = 10
_REQUEST_VERSIONS: Final = REQUEST_VERSIONS
_FLEXIBLE_MIN: Final = FLEXIBLE_MIN
_RequestHeader: Final = RequestHeader
#: Each message class's body writer at a version it supports (its plan's), once ``Message.write`` has
#: checked the version: a response skips that interpreted method and the plan lookup.
_BODY_WRITERS: dict[tuple[type, int], Callable[[Writer, Any], None]] = {}


class FrameDecoder:
    """Splits a byte stream into frames (payloads without the int32 size prefix).

    Each frame's length is validated as soon as its 4-byte prefix is complete,
    before any of its body is buffered.  Complete frames that arrive inside one
    ``feed`` call are returned as zero-copy slices of that (immutable) chunk;
    a frame spread over several calls is accumulated in its own bytearray,
    which is never touched again once returned, so no byte is copied twice and
    returned views stay valid.  After an exception the stream is unusable: close
    the connection.
    """

    __slots__ = ("max_frame_size", "_head", "_body", "_need")

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._head = bytearray()  # partial 4-byte size prefix
        self._body: bytearray | None = None  # partial frame body
        self._need = 0  # bytes still missing from _body

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._head) + (len(self._body) if self._body is not None else 0)

    @property
    def partial_frame_size(self) -> int:
        """Declared size of the frame being accumulated (0 if none), for memory accounting."""
        return len(self._body) + self._need if self._body is not None else 0

    def _check(self, size: int) -> None:
        if size < 0:
            raise DecodeError(f"negative frame size {size}")
        if size > self.max_frame_size:
            raise FrameTooLarge(size, self.max_frame_size)

    def feed(self, data: BytesLike) -> list[memoryview]:
        """Consume ``data``; return the payload of every frame it completes."""
        if not isinstance(data, bytes):
            data = bytes(data)  # callers may reuse mutable buffers; our views must not change
        mv = _MEMORYVIEW(data)
        n = len(mv)
        pos = 0
        frames: list[memoryview] = []
        while pos < n:
            body = self._body
            if body is not None:
                take = min(self._need, n - pos)
                body += mv[pos : pos + take]
                pos += take
                self._need -= take
                if self._need == 0:
                    frames.append(_MEMORYVIEW(body))
                    self._body = None
                continue
            head = self._head
            if not head and n - pos >= 4:
                (size,) = _SIZE_UNPACK_FROM(mv, pos)
                pos += 4
            else:
                take = min(4 - len(head), n - pos)
                head += mv[pos : pos + take]
                pos += take
                if len(head) < 4:
                    break
                (size,) = _SIZE.unpack(head)
                head.clear()
            self._check(size)
            if n - pos >= size:  # whole frame inside this chunk: zero-copy slice
                frames.append(mv[pos : pos + size])
                pos += size
            else:
                self._body = bytearray(mv[pos:])
                self._need = size - (n - pos)
                pos = n
        return frames


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version: 2 for flexible request versions, else 1; ControlledShutdown v0: 0."""
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    fmin = _FLEXIBLE_MIN.get(api_key)
    return 2 if fmin is not None and api_version >= fmin else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version: 1 for flexible versions, else 0; ApiVersions always 0 (KIP-511)."""
    if api_key == API_VERSIONS_KEY:
        return 0
    fmin = _FLEXIBLE_MIN.get(api_key)
    return 1 if fmin is not None and api_version >= fmin else 0


def decode_request_header(frame: BytesLike) -> tuple[RequestHeader, int]:
    """Parse a request frame's header; return it and the offset where the body starts.

    Unknown API keys and out-of-range versions are still parsed as a v1 header
    (key, version, correlation id, client id; no tagged fields) so the server
    can reply UNSUPPORTED_VERSION to the right correlation id.
    """
    fast = _usual_request_header(frame)
    if fast is not None:
        api_key, api_version, correlation_id, client_id, offset = fast
        return _RequestHeader(api_key, api_version, correlation_id, client_id), offset
    return _any_request_header(frame)


RequestHeaderFields = tuple[int, int, int, str | None, int]
"""A request header's API key, API version, correlation id and client id, and the body's offset."""


def decode_request_header_fields(frame: BytesLike) -> RequestHeaderFields:
    """:func:`decode_request_header`'s header as the dispatcher reads it, with no RequestHeader built for the
    usual header (an interpreted class: its construction cost a small request more than this whole parse)."""
    fast = _usual_request_header(frame)
    if fast is not None:
        return fast
    header, offset = _any_request_header(frame)
    return header.request_api_key, header.request_api_version, header.correlation_id, header.client_id, offset


def _any_request_header(frame: BytesLike) -> tuple[RequestHeader, int]:
    """The generated codec's reading of any header, as a v1 header where the key or version is unknown."""
    r = Reader(frame)
    api_key = r.read_int16()
    api_version = r.read_int16()
    r.pos = 0
    supported = REQUEST_VERSIONS.get(api_key)
    if supported is not None and supported[0] <= api_version <= supported[1]:
        version = request_header_version(api_key, api_version)
        return RequestHeader.read(r, version), r.pos
    header = RequestHeader.read(r, 1)
    return header, r.pos


def _usual_request_header(frame: BytesLike) -> RequestHeaderFields | None:
    """The header every client sends, in one unpack: a supported key and version, a client id of valid
    UTF-8 within the frame and, in a v2 header, no tagged fields. None for anything else, which the
    generated codec then reads (and rejects) as before."""
    api_key: int
    api_version: int
    correlation_id: int
    length: int
    try:
        api_key, api_version, correlation_id, length = _HEADER_FIXED_UNPACK_FROM(frame, 0)
    except struct.error:
        return None
    supported = _REQUEST_VERSIONS.get(api_key)
    if supported is None or not supported[0] <= api_version <= supported[1] or length < -1:
        return None
    header_version = request_header_version(api_key, api_version)
    if header_version == 0:  # no client id
        return None
    flexible = header_version == 2
    end = _HEADER_FIXED_SIZE + max(length, 0)
    if end + flexible > len(frame) or (flexible and frame[end] != 0):
        return None
    client_id = None
    if length >= 0:
        try:
            client_id = str(frame[_HEADER_FIXED_SIZE:end], "utf-8")
        except UnicodeDecodeError:
            return None
    return api_key, api_version, correlation_id, client_id, end + flexible


def decode_response_header(frame: BytesLike, api_key: int,
                           api_version: int) -> tuple[ResponseHeader, int]:
    """Parse a response frame's header (client side); return it and the body offset."""
    r = Reader(frame)
    header = ResponseHeader.read(r, response_header_version(api_key, api_version))
    return header, r.pos


def encode_response(correlation_id: int, api_key: int, api_version: int,
                    body: BytesLike) -> bytes:
    """Full response frame: size prefix, header of the right version, then ``body``."""
    if response_header_version(api_key, api_version) == 0:
        head = _HEADER_V0.pack(4 + len(body), correlation_id)
    else:  # v1: correlation id + empty tagged-field section
        head = _HEADER_V0.pack(5 + len(body), correlation_id) + b"\x00"
    return b"".join((head, body))


def encode_response_message(correlation_id: int, api_key: int, api_version: int,
                            msg: Message) -> bytearray:
    """Like :func:`encode_response` but encodes ``msg`` straight into the frame buffer.

    Saves two copies of large payloads (Fetch records) compared with
    ``encode_response(..., msg.encode(v))``; the returned bytearray is the caller's. File ranges
    in records fields are read in; :func:`encode_response_parts` leaves them for the sender.
    """
    w = _response_writer(correlation_id, api_key, api_version, msg)
    return bytearray(w.getvalue()) if w.holes else w.buf


def encode_response_parts(correlation_id: int, api_key: int, api_version: int,
                          msg: Message | EncodedBody) -> list[FramePart]:
    """The response frame as ordered parts: buffer views, and the file ranges of records fields.

    The size prefix already counts the ranges' bytes, so sending the parts in order (copying
    the views, splicing the ranges with ``os.sendfile`` or reading them) yields the exact frame
    :func:`encode_response_message` builds.
    """
    return _response_writer(correlation_id, api_key, api_version, msg).parts()


@dataclasses.dataclass(frozen=True, slots=True)
class EncodedBody:
    """A message body encoded earlier, framed as it is: a server answering the same question again
    (Metadata for a thousand partitions) reuses the bytes and only the response header is new."""

    version: int
    body: bytes

    def write(self, w: Writer, version: int) -> None:
        """Append the stored body; it is only valid at the version it was encoded for."""
        if version != self.version:
            raise EncodeError(f"body encoded at version {self.version} cannot be sent at version {version}")
        w.write_raw(self.body)


def _response_writer(correlation_id: int, api_key: int, api_version: int, msg: Message | EncodedBody) -> Writer:
    w = Writer()
    buf = w.buf
    if response_header_version(api_key, api_version) == 1:
        buf += _HEADER_V1_PACK(0, correlation_id, 0)
    else:
        buf += _HEADER_V0.pack(0, correlation_id)
    write = _BODY_WRITERS.get((type(msg), api_version))
    if write is not None:
        write(w, msg)
    else:
        msg.write(w, api_version)  # checks the version (or writes an EncodedBody)
        if isinstance(msg, Message) and type(msg).write is Message.write:
            _BODY_WRITERS[(type(msg), api_version)] = get_plan(type(msg), api_version).write
    _SIZE_PACK_INTO(buf, 0, w.encoded_size - 4)
    return w


def encode_request(header: RequestHeader, body_msg: Message, api_version: int) -> bytes:
    """Full request frame (client side); the header's key/version are taken from the body."""
    if (header.request_api_key, header.request_api_version) != (body_msg.API_KEY, api_version):
        header = dataclasses.replace(header, request_api_key=body_msg.API_KEY,
                                     request_api_version=api_version)
    w = Writer()
    w.buf += b"\x00\x00\x00\x00"
    header.write(w, request_header_version(body_msg.API_KEY, api_version))
    body_msg.write(w, api_version)
    _SIZE.pack_into(w.buf, 0, len(w.buf) - 4)
    return bytes(w.buf)
