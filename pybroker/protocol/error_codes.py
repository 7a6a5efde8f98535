"""Kafka protocol error codes (``org.apache.kafka.common.protocol.Errors``).

Names and numbers are Kafka's; ``retriable`` follows whether Kafka's Java
exception for the code is a ``RetriableException`` (clients retry those
transparently), and ``message`` is a short default error message for responses.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ErrorCode", "RETRIABLE_CODES"]


class ErrorCode(IntEnum):
    """Every error code defined by Apache Kafka up to 4.x."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133

    @property
    def retriable(self) -> bool:
        """Whether Kafka clients treat this error as transient and retry."""
        return self in RETRIABLE_CODES

    @property
    def message(self) -> str:
        """Default human-readable message (Kafka's default exception text, abridged)."""
        return _MESSAGES.get(self, self.name.replace("_", " ").capitalize() + ".")

    @classmethod
    def from_code(cls, code: int) -> ErrorCode:
        """Map a wire code to the enum; unknown codes become UNKNOWN_SERVER_ERROR."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


E = ErrorCode

#: Codes whose Java exception extends ``RetriableException``.
RETRIABLE_CODES: frozenset[ErrorCode] = frozenset({
    E.CORRUPT_MESSAGE, E.UNKNOWN_TOPIC_OR_PARTITION, E.LEADER_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT, E.REPLICA_NOT_AVAILABLE,
    E.NETWORK_EXCEPTION, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_COORDINATOR, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    E.NOT_CONTROLLER, E.CONCURRENT_TRANSACTIONS, E.KAFKA_STORAGE_ERROR,
    E.FETCH_SESSION_ID_NOT_FOUND, E.INVALID_FETCH_SESSION_EPOCH, E.LISTENER_NOT_FOUND,
    E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH, E.OFFSET_NOT_AVAILABLE,
    E.PREFERRED_LEADER_NOT_AVAILABLE, E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    E.ELECTION_NOT_NEEDED, E.UNSTABLE_OFFSET_COMMIT, E.THROTTLING_QUOTA_EXCEEDED,
    E.UNKNOWN_TOPIC_ID, E.INCONSISTENT_TOPIC_ID, E.FETCH_SESSION_TOPIC_ID_ERROR,
    E.SHARE_SESSION_NOT_FOUND, E.INVALID_SHARE_SESSION_EPOCH, E.SHARE_SESSION_LIMIT_REACHED,
})

_MESSAGES: dict[ErrorCode, str] = {
    E.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    E.NONE: "",
    E.OFFSET_OUT_OF_RANGE: "The requested offset is not within the range of offsets maintained by the server.",
    E.CORRUPT_MESSAGE: "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt.",
    E.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    E.INVALID_FETCH_SIZE: "The requested fetch size is invalid.",
    E.LEADER_NOT_AVAILABLE: "There is no leader for this topic-partition as we are in the middle of a leadership election.",
    E.NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error indicates that the broker is not the current leader. For requests intended for any replica, this error indicates that the broker is not a replica of the topic partition.",
    E.REQUEST_TIMED_OUT: "The request timed out.",
    E.BROKER_NOT_AVAILABLE: "The broker is not available.",
    E.REPLICA_NOT_AVAILABLE: "The replica is not available for the requested topic-partition.",
    E.MESSAGE_TOO_LARGE: "The request included a message larger than the max message size the server will accept.",
    E.STALE_CONTROLLER_EPOCH: "The controller moved to another broker.",
    E.OFFSET_METADATA_TOO_LARGE: "The metadata field of the offset request was too large.",
    E.NETWORK_EXCEPTION: "The server disconnected before a response was received.",
    E.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    E.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    E.NOT_COORDINATOR: "This is not the correct coordinator.",
    E.INVALID_TOPIC_EXCEPTION: "The request attempted to perform an operation on an invalid topic.",
    E.RECORD_LIST_TOO_LARGE: "The request included message batch larger than the configured segment size on the server.",
    E.NOT_ENOUGH_REPLICAS: "Messages are rejected since there are fewer in-sync replicas than required.",
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "Messages are written to the log, but to fewer in-sync replicas than required.",
    E.INVALID_REQUIRED_ACKS: "Produce request specified an invalid value for required acks.",
    E.ILLEGAL_GENERATION: "Specified group generation id is not valid.",
    E.INCONSISTENT_GROUP_PROTOCOL: "The group member's supported protocols are incompatible with those of existing members or first group member tried to join with empty protocol type or empty protocol list.",
    E.INVALID_GROUP_ID: "The configured groupId is invalid.",
    E.UNKNOWN_MEMBER_ID: "The coordinator is not aware of this member.",
    E.INVALID_SESSION_TIMEOUT: "The session timeout is not within the range allowed by the broker (as configured by group.min.session.timeout.ms and group.max.session.timeout.ms).",
    E.REBALANCE_IN_PROGRESS: "The group is rebalancing, so a rejoin is needed.",
    E.INVALID_COMMIT_OFFSET_SIZE: "The committing offset data size is not valid.",
    E.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    E.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    E.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    E.INVALID_TIMESTAMP: "The timestamp of the message is out of acceptable range.",
    E.UNSUPPORTED_SASL_MECHANISM: "The broker does not support the requested SASL mechanism.",
    E.ILLEGAL_SASL_STATE: "Request is not valid given the current SASL state.",
    E.UNSUPPORTED_VERSION: "The version of API is not supported.",
    E.TOPIC_ALREADY_EXISTS: "Topic with this name already exists.",
    E.INVALID_PARTITIONS: "Number of partitions is below 1.",
    E.INVALID_REPLICATION_FACTOR: "Replication factor is below 1 or larger than the number of available brokers.",
    E.INVALID_REPLICA_ASSIGNMENT: "Replica assignment is invalid.",
    E.INVALID_CONFIG: "Configuration is invalid.",
    E.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    E.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.",
    E.UNSUPPORTED_FOR_MESSAGE_FORMAT: "The message format version on the broker does not support the request.",
    E.POLICY_VIOLATION: "Request parameters do not satisfy the configured policy.",
    E.OUT_OF_ORDER_SEQUENCE_NUMBER: "The broker received an out of order sequence number.",
    E.DUPLICATE_SEQUENCE_NUMBER: "The broker received a duplicate sequence number.",
    E.INVALID_PRODUCER_EPOCH: "Producer attempted to produce with an old epoch.",
    E.INVALID_TXN_STATE: "The producer attempted a transactional operation in an invalid state.",
    E.INVALID_PRODUCER_ID_MAPPING: "The producer attempted to use a producer id which is not currently assigned to its transactional id.",
    E.INVALID_TRANSACTION_TIMEOUT: "The transaction timeout is larger than the maximum value allowed by the broker (as configured by transaction.max.timeout.ms).",
    E.CONCURRENT_TRANSACTIONS: "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.",
    E.TRANSACTION_COORDINATOR_FENCED: "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer.",
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
    E.SECURITY_DISABLED: "Security features are disabled.",
    E.OPERATION_NOT_ATTEMPTED: "The broker did not attempt to execute this operation.",
    E.KAFKA_STORAGE_ERROR: "Disk error when trying to access log file on the disk.",
    E.LOG_DIR_NOT_FOUND: "The user-specified log directory is not found in the broker config.",
    E.SASL_AUTHENTICATION_FAILED: "SASL Authentication failed.",
    E.UNKNOWN_PRODUCER_ID: "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question.",
    E.REASSIGNMENT_IN_PROGRESS: "A partition reassignment is in progress.",
    E.DELEGATION_TOKEN_AUTH_DISABLED: "Delegation Token feature is not enabled.",
    E.DELEGATION_TOKEN_NOT_FOUND: "Delegation Token is not found on server.",
    E.DELEGATION_TOKEN_OWNER_MISMATCH: "Specified Principal is not valid Owner/Renewer.",
    E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels.",
    E.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "Delegation Token authorization failed.",
    E.DELEGATION_TOKEN_EXPIRED: "Delegation Token is expired.",
    E.INVALID_PRINCIPAL_TYPE: "Supplied principalType is not supported.",
    E.NON_EMPTY_GROUP: "The group is not empty.",
    E.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    E.FETCH_SESSION_ID_NOT_FOUND: "The fetch session ID was not found.",
    E.INVALID_FETCH_SESSION_EPOCH: "The fetch session epoch is invalid.",
    E.LISTENER_NOT_FOUND: "There is no listener on the leader broker that matches the listener on which metadata request was processed.",
    E.TOPIC_DELETION_DISABLED: "Topic deletion is disabled.",
    E.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the epoch on the broker.",
    E.UNKNOWN_LEADER_EPOCH: "The leader epoch in the request is newer than the epoch on the broker.",
    E.UNSUPPORTED_COMPRESSION_TYPE: "The requesting client does not support the compression type of given partition.",
    E.STALE_BROKER_EPOCH: "Broker epoch has changed.",
    E.OFFSET_NOT_AVAILABLE: "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing.",
    E.MEMBER_ID_REQUIRED: "The group member needs to have a valid member id before actually entering a consumer group.",
    E.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    E.GROUP_MAX_SIZE_REACHED: "The group has reached its maximum size.",
    E.FENCED_INSTANCE_ID: "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.",
    E.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
    E.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    E.NO_REASSIGNMENT_IN_PROGRESS: "No partition reassignment is in progress.",
    E.GROUP_SUBSCRIBED_TO_TOPIC: "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.",
    E.INVALID_RECORD: "This record has failed the validation on broker and hence will be rejected.",
    E.UNSTABLE_OFFSET_COMMIT: "There are unstable offsets that need to be cleared.",
    E.THROTTLING_QUOTA_EXCEEDED: "The throttling quota has been exceeded.",
    E.PRODUCER_FENCED: "There is a newer producer with the same transactionalId which fences the current one.",
    E.RESOURCE_NOT_FOUND: "A request illegally referred to a resource that does not exist.",
    E.DUPLICATE_RESOURCE: "A request illegally referred to the same resource twice.",
    E.UNACCEPTABLE_CREDENTIAL: "Requested credential would not meet criteria for acceptability.",
    E.INCONSISTENT_VOTER_SET: "Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters.",
    E.INVALID_UPDATE_VERSION: "The given update version was invalid.",
    E.FEATURE_UPDATE_FAILED: "Unable to update finalized features due to an unexpected server error.",
    E.PRINCIPAL_DESERIALIZATION_FAILURE: "Request principal deserialization failed during forwarding.",
    E.SNAPSHOT_NOT_FOUND: "Requested snapshot was not found.",
    E.POSITION_OUT_OF_RANGE: "Requested position is not greater than or equal to zero, and less than the size of the snapshot.",
    E.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    E.DUPLICATE_BROKER_REGISTRATION: "This broker ID is already in use.",
    E.BROKER_ID_NOT_REGISTERED: "The given broker ID was not registered.",
    E.INCONSISTENT_TOPIC_ID: "The log's topic ID did not match the topic ID in the request.",
    E.INCONSISTENT_CLUSTER_ID: "The clusterId in the request does not match that found on the server.",
    E.TRANSACTIONAL_ID_NOT_FOUND: "The transactionalId could not be found.",
    E.FETCH_SESSION_TOPIC_ID_ERROR: "The fetch session encountered inconsistent topic ID usage.",
    E.INELIGIBLE_REPLICA: "The new ISR contains at least one ineligible replica.",
    E.NEW_LEADER_ELECTED: "The AlterPartition request successfully updated the partition state but the leader has changed.",
    E.OFFSET_MOVED_TO_TIERED_STORAGE: "The requested offset is moved to tiered storage.",
    E.FENCED_MEMBER_EPOCH: "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.",
    E.UNRELEASED_INSTANCE_ID: "The instance ID is still used by another member in the consumer group. That member must leave first.",
    E.UNSUPPORTED_ASSIGNOR: "The assignor or its version range is not supported by the consumer group.",
    E.STALE_MEMBER_EPOCH: "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.",
    E.MISMATCHED_ENDPOINT_TYPE: "The request was sent to an endpoint of the wrong type.",
    E.UNSUPPORTED_ENDPOINT_TYPE: "This endpoint type is not supported yet.",
    E.UNKNOWN_CONTROLLER_ID: "This controller ID is not known.",
    E.UNKNOWN_SUBSCRIPTION_ID: "Client sent a push telemetry request with an invalid or outdated subscription ID.",
    E.TELEMETRY_TOO_LARGE: "Client sent a push telemetry request larger than the maximum size the broker will accept.",
    E.INVALID_REGISTRATION: "The controller has considered the broker registration to be invalid.",
    E.TRANSACTION_ABORTABLE: "The server encountered an error with the transaction. The client can abort the transaction to continue using this transactional ID.",
    E.INVALID_RECORD_STATE: "The record state is invalid. The acknowledgement of delivery could not be completed.",
    E.SHARE_SESSION_NOT_FOUND: "The share session was not found.",
    E.INVALID_SHARE_SESSION_EPOCH: "The share session epoch is invalid.",
    E.FENCED_STATE_EPOCH: "The share coordinator rejected the request because the share-group state epoch did not match.",
    E.INVALID_VOTER_KEY: "The voter key doesn't match the receiving replica's key.",
    E.DUPLICATE_VOTER: "The voter is already part of the set of voters.",
    E.VOTER_NOT_FOUND: "The voter is not part of the set of voters.",
    E.INVALID_REGULAR_EXPRESSION: "The regular expression is not valid.",
    E.REBOOTSTRAP_REQUIRED: "Client metadata is stale. The client should rebootstrap to obtain new metadata.",
    E.STREAMS_INVALID_TOPOLOGY: "The supplied topology is invalid.",
    E.STREAMS_INVALID_TOPOLOGY_EPOCH: "The supplied topology epoch is invalid.",
    E.STREAMS_TOPOLOGY_FENCED: "The supplied topology epoch is outdated.",
    E.SHARE_SESSION_LIMIT_REACHED: "The limit of share sessions has been reached.",
}

del E
