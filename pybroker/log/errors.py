"""Exceptions raised by the log layer.

The log never knows Kafka wire error codes: ``server/error_mapping.py`` translates these
(OffsetOutOfRangeError -> OFFSET_OUT_OF_RANGE, OutOfOrderSequenceError ->
OUT_OF_ORDER_SEQUENCE_NUMBER, ...). Record-level problems found while appending are raised as
the records layer's own exceptions (re-exported here) so there is one class per problem.
"""

from __future__ import annotations

from typing import Callable

from pybroker.records.errors import CorruptRecordError, RecordTooLargeError

__all__ = [
    "LogError",
    "OffsetOutOfRangeError",
    "CorruptLogError",
    "LogClosedError",
    "LogStorageError",
    "LogDirNotFoundError",
    "SliceUnavailableError",
    "ColdReadError",
    "UnexpectedAppendOffsetError",
    "InvalidReadSizeError",
    "InvalidLogConfig",
    "IllegalTopicNameError",
    "InconsistentTopicIdError",
    "ProducerStateError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "UnknownProducerIdError",
    "CorruptRecordError",
    "RecordTooLargeError",
]


class LogError(Exception):
    """Base class of every error raised by :mod:`pybroker.log`."""


class OffsetOutOfRangeError(LogError):
    """A fetch asked for an offset outside ``[log_start, log_end]``."""

    def __init__(self, offset: int, log_start: int, log_end: int) -> None:
        super().__init__(
            f"Offset {offset} is out of range: the log holds [{log_start}, {log_end})"
        )
        self.offset = offset
        self.log_start = log_start
        self.log_end = log_end


class CorruptLogError(LogError):
    """On-disk state (index, checkpoint, metadata file) is malformed."""


class ColdReadError(LogError):
    """A read asked to use only the page cache met a page that is not there. ``warm`` reads the
    range into the cache on its own descriptor (for an I/O thread); the read is then retried on
    the loop, so that the loop never waits for the disk."""

    def __init__(self, path: str, position: int, warm: Callable[[], None]) -> None:
        super().__init__(f"{path} at {position} is not in the page cache")
        self.warm = warm


class LogClosedError(LogError):
    """The log or segment was closed (or deleted) and can no longer be used."""


class LogStorageError(LogError):
    """An OS-level I/O error on a log file (Kafka's KafkaStorageException)."""


class LogDirNotFoundError(LogError):
    """A log dir named by a request (AlterReplicaLogDirs) is not one of the broker's ``log.dirs``."""


class SliceUnavailableError(LogStorageError):
    """A FileSlice can no longer be read: its segment was deleted, closed or truncated."""


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose offsets do not continue the log (non-monotonic or below LEO)."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class InvalidReadSizeError(LogError, ValueError):
    """A read asked for a negative number of bytes (a Fetch with negative max bytes); Kafka's
    LogSegment.read rejects it too, and the fetch answers UNKNOWN_SERVER_ERROR for the partition."""


class IllegalTopicNameError(LogError, ValueError):
    """A log asked for under a name that is not a legal topic name: it would be a path outside the
    log dir (``../x``) or one Kafka could not read back; nothing is created."""


class InconsistentTopicIdError(LogError):
    """The log on disk belongs to another topic of the same name: its ``partition.metadata`` records another
    topic id than the one asked for (Kafka's InconsistentTopicIdException). The log is left as it is."""


class InvalidLogConfig(LogError, ValueError):
    """A topic config value that cannot be used; the message names the key."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"Invalid value {value!r} for configuration {key}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


class ProducerStateError(LogError):
    """Base of idempotent-producer validation failures."""


class OutOfOrderSequenceError(ProducerStateError):
    """The batch's sequence does not follow the last one seen for this producer and epoch."""


class InvalidProducerEpochError(ProducerStateError):
    """The batch carries an epoch older than the producer's current epoch (a zombie)."""


class UnknownProducerIdError(ProducerStateError):
    """The producer's state was removed (retention/expiry) and it did not restart at seq 0."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """A COMMIT/ABORT marker from a coordinator epoch older than one already seen for the producer:
    a coordinator that lost its partition of ``__transaction_state`` still sending markers."""
