"""Failures of metadata operations; the server maps them to Kafka error codes in one place."""


class MetadataError(Exception):
    """Base of every metadata failure; the message is what the client is told."""


class TopicExistsError(MetadataError):
    pass


class UnknownTopicError(MetadataError):
    pass


class InvalidTopicError(MetadataError):
    pass


class InvalidPartitionsError(MetadataError):
    pass


class InvalidReplicationFactorError(MetadataError):
    pass


class InvalidReplicaAssignmentError(MetadataError):
    pass


class InvalidTopicConfigError(MetadataError):
    pass


class TopicDeletionDisabledError(MetadataError):
    pass


class NoReassignmentInProgressError(MetadataError):
    pass
