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
    "RecordValidationError",
    "UnsupportedCompressionError",
]


class RecordsError(Exception):
    """Base class for every error raised by :mod:`pybroker.records`."""


class CorruptRecordError(RecordsError):
    """The bytes do not form a valid v2 batch/record (bad magic, length, CRC, varint...)."""


class InvalidRecordError(CorruptRecordError):
    """The request's records break a rule of the Produce API rather than of the batch format."""


class RecordValidationError(InvalidRecordError):
    """Some records of a batch break a rule of their topic (no key on a compacted topic, a timestamp
    out of range): Kafka refuses the batch naming each one (KIP-467 ``record_errors``), with
    INVALID_TIMESTAMP if any timestamp is wrong, else INVALID_RECORD, and LogValidator's message."""

    def __init__(self, record_errors: list[tuple[int, str]], invalid_timestamp: bool) -> None:
        self.record_errors = record_errors
        self.invalid_timestamp = invalid_timestamp
        if invalid_timestamp:
            message = "One or more records have been rejected due to invalid timestamp"
        else:
            quoted = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
            message = (f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
                       f"and only showing the first three errors at most: [{quoted}]")
        super().__init__(message)


class RecordTooLargeError(RecordsError):
    """A batch is larger than the allowed maximum (``max.message.bytes``)."""


class UnsupportedCompressionError(RecordsError):
    """The compression codec id is unknown or its library is unavailable."""
