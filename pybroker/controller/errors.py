"""Failures of the controller; those of metadata operations are in :mod:`pybroker.common.metadata_errors`,
which the command-line tools share, and are re-exported here for the controller's and the server's imports."""

from pybroker.common.metadata_errors import (
    MetadataError,
    TopicExistsError,
    UnknownTopicError,
    InvalidTopicError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidReplicaAssignmentError,
    InvalidTopicConfigError,
    TopicDeletionDisabledError,
    NoReassignmentInProgressError,
)

__all__ = [
    "MetadataError",
    "TopicExistsError",
    "UnknownTopicError",
    "InvalidTopicError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidReplicaAssignmentError",
    "InvalidTopicConfigError",
    "TopicDeletionDisabledError",
    "NoReassignmentInProgressError",
    "NotControllerError",
    "StaleBrokerEpochError",
    "BrokerIdNotRegisteredError",
]


class NotControllerError(Exception):
    """This broker is not (or no longer) the controller: NOT_CONTROLLER."""


class StaleBrokerEpochError(Exception):
    """The request names a broker registration that is not the current one: STALE_BROKER_EPOCH."""


class BrokerIdNotRegisteredError(Exception):
    """The request names a broker the controller does not know as live: BROKER_ID_NOT_REGISTERED."""
