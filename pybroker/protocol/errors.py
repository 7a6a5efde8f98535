"""Exceptions raised by the wire-protocol layer.

They are deliberately few: the server turns a :class:`DecodeError` into an
error response (or a closed connection) and a :class:`FrameTooLarge` into a
closed connection, so callers only need to catch these.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of every error raised by :mod:`pybroker.protocol`."""


class DecodeError(ProtocolError, ValueError):
    """Input bytes are truncated, malformed or use an unsupported version.

    ``error_code`` is an optional Kafka error-code hint for the response the
    server should send (e.g. 35 UNSUPPORTED_VERSION, 42 INVALID_REQUEST).
    """

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class EncodeError(ProtocolError, ValueError):
    """A message cannot be encoded (bad value, null where not allowed, bad version)."""


class FrameTooLarge(ProtocolError):
    """A frame's length prefix exceeds the configured maximum.

    Raised before any of the frame's body is buffered, so a hostile peer cannot
    make us allocate an arbitrary amount of memory.
    """

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum of {max_size} bytes")
        self.size = size
        self.max_size = max_size
