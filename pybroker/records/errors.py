"""Exceptions raised by the records layer.

Kept free of any broker error-code mapping: the protocol/server layers translate
these into Kafka error codes (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
UNSUPPORTED_COMPRESSION_TYPE) themselves.
"""

from __future__ import annotations

__all__ = [
    "RecordsError",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordTooLargeError",
    "UnsupportedCompressionError",
]


class RecordsError(Exception):
    """Base class for every error raised by :mod:`pybroker.records`."""


class CorruptRecordError(RecordsError):
    """The bytes do not form a valid v2 batch/record (bad magic, length, CRC, varint...)."""


class InvalidRecordError(CorruptRecordError):
    """The request's records break a rule of the Produce API rather than of the batch format."""


class RecordTooLargeError(RecordsError):
    """A batch is larger than the allowed maximum (``max.message.bytes``)."""


class UnsupportedCompressionError(RecordsError):
    """The compression codec id is unknown or its library is unavailable."""
