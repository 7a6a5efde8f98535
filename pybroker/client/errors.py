"""Exceptions of the client: one base class, so a caller (the CLI) can catch everything we raise."""

from __future__ import annotations

from pybroker.protocol.error_codes import ErrorCode


class KafkaClientError(Exception):
    """Base of every failure reported by :mod:`pybroker.client`."""


class KafkaConnectionError(KafkaClientError):
    """A broker could not be reached, or the connection broke while requests were in flight."""


class KafkaTimeoutError(KafkaClientError, TimeoutError):
    """A connection or a response did not arrive within the allowed time."""


class UnsupportedVersionError(KafkaClientError):
    """The broker and our codecs share no version of an API we need."""


class ResponseError(KafkaClientError):
    """A broker answered with a non-zero error code.

    The text is the broker's error message when it sent one, else Kafka's default message for the
    code, which is what Kafka's own tools print.
    """

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = ErrorCode.from_code(code)
        super().__init__(message or self.code.message)


def check(code: int, message: str | None = None) -> None:
    """Raise :class:`ResponseError` unless ``code`` is NONE."""
    if code != ErrorCode.NONE:
        raise ResponseError(code, message)
