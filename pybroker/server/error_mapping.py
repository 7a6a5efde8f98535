"""The one place where subsystem exceptions become Kafka wire error codes."""

from __future__ import annotations

import logging

from pybroker.controller import errors as controller
from pybroker.coordinator.runtime import CoordinatorStorageError
from pybroker.log import errors as log_errors
from pybroker.protocol.error_codes import ErrorCode
from pybroker.records import errors as records
from pybroker.replication import errors as replication

log = logging.getLogger("pybroker.server")

_CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (CoordinatorStorageError, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (records.RecordTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
    (records.UnsupportedCompressionError, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (records.CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    (log_errors.OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    (log_errors.OutOfOrderSequenceError, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (log_errors.InvalidProducerEpochError, ErrorCode.INVALID_PRODUCER_EPOCH),
    (log_errors.UnknownProducerIdError, ErrorCode.UNKNOWN_PRODUCER_ID),
    (log_errors.TransactionCoordinatorFencedError, ErrorCode.TRANSACTION_COORDINATOR_FENCED),
    (log_errors.LogError, ErrorCode.KAFKA_STORAGE_ERROR),
    (replication.UnknownPartitionError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (replication.NotLeaderError, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (replication.NotEnoughReplicasError, ErrorCode.NOT_ENOUGH_REPLICAS),
    (replication.FencedLeaderEpochError, ErrorCode.FENCED_LEADER_EPOCH),
    (replication.UnknownLeaderEpochError, ErrorCode.UNKNOWN_LEADER_EPOCH),
    (controller.TopicExistsError, ErrorCode.TOPIC_ALREADY_EXISTS),
    (controller.UnknownTopicError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (controller.InvalidTopicError, ErrorCode.INVALID_TOPIC_EXCEPTION),
    (controller.InvalidPartitionsError, ErrorCode.INVALID_PARTITIONS),
    (controller.InvalidReplicationFactorError, ErrorCode.INVALID_REPLICATION_FACTOR),
    (controller.InvalidReplicaAssignmentError, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (controller.InvalidTopicConfigError, ErrorCode.INVALID_CONFIG),
    (controller.TopicDeletionDisabledError, ErrorCode.TOPIC_DELETION_DISABLED),
]


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code for `exc`; unexpected exceptions are logged and become UNKNOWN_SERVER_ERROR."""
    for exc_type, code in _CODES:
        if isinstance(exc, exc_type):
            return code
    log.error("Unexpected error while handling a request", exc_info=exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR


def error_message_for(exc: BaseException) -> str | None:
    return str(exc) or None
