"""Failures of metadata operations (topics, partitions, replica assignments), raised by the controller and by
the command-line tools that write ZooKeeper themselves; the server maps them to Kafka error codes in one place."""


class MetadataError(Exception):
    """Base of every metadata failure; the message is what the client is told."""


class TopicExistsError(MetadataError):
    """TOPIC_ALREADY_EXISTS."""


class UnknownTopicError(MetadataError):
    """UNKNOWN_TOPIC_OR_PARTITION."""


class InvalidTopicError(MetadataError):
    """INVALID_TOPIC_EXCEPTION: a bad name."""


class InvalidPartitionsError(MetadataError):
    """INVALID_PARTITIONS: a bad partition count."""


class InvalidReplicationFactorError(MetadataError):
    """INVALID_REPLICATION_FACTOR: more replicas than brokers, or fewer than one."""


class InvalidReplicaAssignmentError(MetadataError):
    """INVALID_REPLICA_ASSIGNMENT: unknown brokers, repeats, or uneven replica counts."""


class InvalidTopicConfigError(MetadataError):
    """INVALID_CONFIG: an unknown key or a bad value."""


class TopicDeletionDisabledError(MetadataError):
    """TOPIC_DELETION_DISABLED: delete.topic.enable is false."""


class NoReassignmentInProgressError(MetadataError):
    """NO_REASSIGNMENT_IN_PROGRESS: a cancel for a partition that is not moving."""
