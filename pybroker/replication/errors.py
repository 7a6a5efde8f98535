"""Failures of partition operations; the server maps them to Kafka error codes in one place."""


class ReplicationError(Exception):
    pass


class UnknownPartitionError(ReplicationError):
    """This broker hosts no replica of the partition."""


class NotLeaderError(ReplicationError):
    """This broker hosts the partition but does not lead it."""


class NotEnoughReplicasError(ReplicationError):
    """acks=all was asked while the ISR is smaller than min.insync.replicas."""


class FencedLeaderEpochError(ReplicationError):
    """The request names an older leader epoch than the current one."""


class UnknownLeaderEpochError(ReplicationError):
    """The request names a newer leader epoch than this broker knows."""


class NotEnoughReplicasAfterAppendError(ReplicationError):
    """acks=all: the batch was written, but the ISR shrank below min.insync.replicas before it was replicated."""


class ReplicaTimeoutError(ReplicationError):
    """acks=all: the ISR did not replicate the batch within the request's timeout."""


class PolicyViolationError(ReplicationError):
    """DeleteRecords on a log whose cleanup.policy does not include delete."""


class InvalidRequiredAcksError(ReplicationError):
    """Produce with acks other than 0, 1 or -1."""


class InternalTopicError(ReplicationError):
    """A client's produce to an internal topic, which only the coordinators write."""


class TransactionalIdRequiredError(ReplicationError):
    """A transactional batch in a produce request without a transactional id."""
