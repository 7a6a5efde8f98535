"""The one place where subsystem exceptions become Kafka wire error codes.

Every exception pybroker defines that a handler can meet has a row here (a unit test walks the
package to check it), so an expected failure answers its own code without a log line. Anything
else is a bug: it answers UNKNOWN_SERVER_ERROR and its traceback is logged at most once a minute
per exception type, so a client retrying a failing request cannot flood the log.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from pybroker.client import errors as client
from pybroker.common.config import ConfigError
from pybroker.common.open_files import OpenFilesLimitError
from pybroker.controller import errors as controller
from pybroker.controller.errors import NotControllerError, StaleBrokerEpochError
from pybroker.controller.producer_ids import ProducerIdsUnavailableError
from pybroker.coordinator.runtime import CoordinatorStorageError, NotCoordinatorError
from pybroker.log import errors as log_errors
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.errors import DecodeError
from pybroker.records import errors as records
from pybroker.replication import errors as replication

log = logging.getLogger("pybroker.server")

# First match wins: subclasses come before their bases.
CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (CoordinatorStorageError, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (NotCoordinatorError, ErrorCode.NOT_COORDINATOR),
    (NotControllerError, ErrorCode.NOT_CONTROLLER),
    (StaleBrokerEpochError, ErrorCode.STALE_BROKER_EPOCH),
    (controller.BrokerIdNotRegisteredError, ErrorCode.BROKER_ID_NOT_REGISTERED),
    (ProducerIdsUnavailableError, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
    (records.InvalidRecordError, ErrorCode.INVALID_RECORD),
    (records.RecordTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
    (records.UnsupportedCompressionError, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (records.CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    (log_errors.OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    (log_errors.OutOfOrderSequenceError, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (log_errors.InvalidProducerEpochError, ErrorCode.INVALID_PRODUCER_EPOCH),
    (log_errors.UnknownProducerIdError, ErrorCode.UNKNOWN_PRODUCER_ID),
    (log_errors.TransactionCoordinatorFencedError, ErrorCode.TRANSACTION_COORDINATOR_FENCED),
    (log_errors.InvalidLogConfig, ErrorCode.INVALID_CONFIG),
    (log_errors.IllegalTopicNameError, ErrorCode.INVALID_TOPIC_EXCEPTION),
    # Kafka's LogSegment.read throws IllegalArgumentException, which Fetch answers UNKNOWN_SERVER_ERROR.
    (log_errors.InvalidReadSizeError, ErrorCode.UNKNOWN_SERVER_ERROR),
    (log_errors.LogDirNotFoundError, ErrorCode.LOG_DIR_NOT_FOUND),
    (log_errors.InconsistentTopicIdError, ErrorCode.INCONSISTENT_TOPIC_ID),
    (log_errors.LogError, ErrorCode.KAFKA_STORAGE_ERROR),
    (replication.UnknownPartitionError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (replication.NotLeaderError, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (replication.NotEnoughReplicasAfterAppendError, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND),
    (replication.NotEnoughReplicasError, ErrorCode.NOT_ENOUGH_REPLICAS),
    (replication.FencedLeaderEpochError, ErrorCode.FENCED_LEADER_EPOCH),
    (replication.UnknownLeaderEpochError, ErrorCode.UNKNOWN_LEADER_EPOCH),
    (replication.ReplicaTimeoutError, ErrorCode.REQUEST_TIMED_OUT),
    (replication.PolicyViolationError, ErrorCode.POLICY_VIOLATION),
    (replication.InvalidRequiredAcksError, ErrorCode.INVALID_REQUIRED_ACKS),
    (replication.InternalTopicError, ErrorCode.INVALID_TOPIC_EXCEPTION),
    (replication.TransactionalIdRequiredError, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (controller.TopicExistsError, ErrorCode.TOPIC_ALREADY_EXISTS),
    (controller.UnknownTopicError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (controller.InvalidTopicError, ErrorCode.INVALID_TOPIC_EXCEPTION),
    (controller.InvalidPartitionsError, ErrorCode.INVALID_PARTITIONS),
    (controller.InvalidReplicationFactorError, ErrorCode.INVALID_REPLICATION_FACTOR),
    (controller.InvalidReplicaAssignmentError, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (controller.InvalidTopicConfigError, ErrorCode.INVALID_CONFIG),
    (controller.TopicDeletionDisabledError, ErrorCode.TOPIC_DELETION_DISABLED),
    (controller.NoReassignmentInProgressError, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
    (ConfigError, ErrorCode.INVALID_CONFIG),
    (OpenFilesLimitError, ErrorCode.POLICY_VIOLATION),
    (DecodeError, ErrorCode.INVALID_REQUEST),  # bytes inside a request (e.g. group metadata) that do not parse
    (client.KafkaTimeoutError, ErrorCode.REQUEST_TIMED_OUT),  # another broker, asked on the request's behalf
    (client.KafkaConnectionError, ErrorCode.NETWORK_EXCEPTION),
    (client.UnsupportedVersionError, ErrorCode.UNSUPPORTED_VERSION),
]


@dataclass
class _ThrottledLog:
    """Logs an unexpected error's traceback once per ``interval_s`` per exception type, counting the rest."""

    interval_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _last: dict[type[BaseException], float] = field(default_factory=dict)
    _suppressed: dict[type[BaseException], int] = field(default_factory=dict)

    def report(self, exc: BaseException) -> None:
        kind, now = type(exc), self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        suppressed = self._suppressed.pop(kind, 0)
        since = f" ({suppressed} more {kind.__name__} since the last report)" if suppressed else ""
        log.error("Unexpected error while handling a request%s", since, exc_info=exc)


_unexpected = _ThrottledLog()


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code for `exc`; unexpected exceptions are logged (throttled) as UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, client.ResponseError):  # another broker's answer, passed on as it is
        return exc.code
    for exc_type, code in CODES:
        if isinstance(exc, exc_type):
            return code
    _unexpected.report(exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR


def error_message_for(exc: BaseException) -> str | None:
    return str(exc) or None
