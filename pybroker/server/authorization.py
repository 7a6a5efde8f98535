"""What handlers ask the authorizer (Kafka's AuthHelper), and which APIs ask nothing.

Without ``authorizer.class.name`` the broker has no authorizer and every check passes, as in
Kafka. With one, a handler checks its request where KafkaApis does, through `authorize` (one
resource), `allowed_names` (a batch of topics or groups, each decided once) and
`authorized_operations` (the bit field of Metadata, DescribeCluster and DescribeGroups). The
principal is the connection's (``User:ANONYMOUS`` on a PLAINTEXT listener, a principal like any
other); the host is the client's IP address, as Kafka matches ACL hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from pybroker.common.config import BrokerConfig
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.security.acl import CLUSTER_NAME, RESOURCE_OPERATIONS, AclOperation, ResourceType
from pybroker.security.authorizer import Authorizer, authorizer_enabled, parse_super_users

if TYPE_CHECKING:
    from pybroker.server.context import RequestContext

# Kafka's APIs that check no ACL: the connection handshake, the lookups every client needs before
# it may be refused anything, and the APIs that check something else (the principal's own
# credentials or quotas, a group's membership). FindCoordinator checks Describe on the group or
# transactional id it looks up, so it is not here.
NO_ACL_APIS = frozenset({
    ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY,  # a client's own metrics (KafkaApis checks none)
})


# The APIs whose handlers ask the authorizer, with what they check (KafkaApis' checks).
CHECKED_APIS: dict[int, str] = {
    ApiKey.PRODUCE: "Write on each topic; Write on the transactional id",
    ApiKey.FETCH: "Read on each topic (consumers); ClusterAction (followers)",
    ApiKey.LIST_OFFSETS: "Describe on each topic",
    ApiKey.METADATA: "Describe on each topic (unlisted or TOPIC_AUTHORIZATION_FAILED); Create to auto-create",
    ApiKey.LEADER_AND_ISR: "ClusterAction", ApiKey.STOP_REPLICA: "ClusterAction",
    ApiKey.UPDATE_METADATA: "ClusterAction", ApiKey.CONTROLLED_SHUTDOWN: "ClusterAction",
    ApiKey.WRITE_TXN_MARKERS: "ClusterAction", ApiKey.ALLOCATE_PRODUCER_IDS: "ClusterAction",
    ApiKey.ALTER_PARTITION: "ClusterAction",
    ApiKey.INIT_PRODUCER_ID: "Write on the transactional id; IdempotentWrite or Write on some topic",
    ApiKey.FIND_COORDINATOR: "Describe on the group or transactional id",
    ApiKey.JOIN_GROUP: "Read on the group", ApiKey.SYNC_GROUP: "Read on the group",
    ApiKey.HEARTBEAT: "Read on the group", ApiKey.LEAVE_GROUP: "Read on the group",
    ApiKey.DESCRIBE_GROUPS: "Describe on each group",
    ApiKey.OFFSET_COMMIT: "Read on the group and each topic",
    ApiKey.OFFSET_FETCH: "Describe on each group and each topic",
    ApiKey.ADD_PARTITIONS_TO_TXN: "Write on the transactional id and each topic (v0-3); ClusterAction (v4+)",
    ApiKey.ADD_OFFSETS_TO_TXN: "Write on the transactional id, Read on the group",
    ApiKey.END_TXN: "Write on the transactional id",
    ApiKey.TXN_OFFSET_COMMIT: "Write on the transactional id, Read on the group and each topic",
    ApiKey.DESCRIBE_ACLS: "Describe on the cluster", ApiKey.CREATE_ACLS: "Alter on the cluster",
    ApiKey.DELETE_ACLS: "Alter on the cluster",
    ApiKey.CREATE_TOPICS: "Create on the cluster or each topic; DescribeConfigs on each topic to see its configs",
    ApiKey.DELETE_TOPICS: "Delete on each topic (Describe too when named by id)",
    ApiKey.CREATE_PARTITIONS: "Alter on each topic",
    ApiKey.DESCRIBE_CONFIGS: "DescribeConfigs on each topic or group; on the cluster for broker configs",
    ApiKey.ALTER_CONFIGS: "AlterConfigs on each topic or group; on the cluster for broker configs",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "AlterConfigs on each topic or group; on the cluster for broker configs",
    ApiKey.DESCRIBE_CLUSTER: "Describe on the cluster decides cluster_authorized_operations (refuses no one)",
    ApiKey.LIST_GROUPS: "Describe on the cluster, else the groups listed are those with Describe",
    ApiKey.DELETE_GROUPS: "Delete on each group",
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "Read on the group",
    ApiKey.CONSUMER_GROUP_DESCRIBE: "Describe on each group",
    ApiKey.SHARE_GROUP_HEARTBEAT: "Read on the group; Describe on each subscribed topic",
    ApiKey.SHARE_GROUP_DESCRIBE: "Describe on each group",
    ApiKey.SHARE_FETCH: "Read on the group; Read on each topic",
    ApiKey.SHARE_ACKNOWLEDGE: "Read on the group; Read on each topic",
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: "Describe on each group; Describe on each topic",
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: "Read on the group; Read on each topic",
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: "Delete on the group; Read on each topic",
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: "ClusterAction", ApiKey.READ_SHARE_GROUP_STATE: "ClusterAction",
    ApiKey.WRITE_SHARE_GROUP_STATE: "ClusterAction", ApiKey.DELETE_SHARE_GROUP_STATE: "ClusterAction",
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: "ClusterAction",
    ApiKey.OFFSET_DELETE: "Delete on the group, Read on each topic",
    ApiKey.DESCRIBE_PRODUCERS: "Read on each topic",
    ApiKey.DESCRIBE_TRANSACTIONS: "Describe on each transactional id (and its topics, to list them)",
    ApiKey.LIST_TRANSACTIONS: "the transactional ids listed are those with Describe",
    ApiKey.ELECT_LEADERS: "Alter on the cluster", ApiKey.ALTER_PARTITION_REASSIGNMENTS: "Alter on the cluster",
    ApiKey.LIST_PARTITION_REASSIGNMENTS: "Describe on the cluster",
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: "Describe on each topic (unlisted or TOPIC_AUTHORIZATION_FAILED)",
    ApiKey.DELETE_RECORDS: "Delete on each topic",
    ApiKey.OFFSET_FOR_LEADER_EPOCH: "ClusterAction (followers), else Describe on each topic",
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: "Describe on the cluster",
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: "Alter on the cluster",
    ApiKey.UPDATE_FEATURES: "Alter on the cluster",
    ApiKey.LIST_CONFIG_RESOURCES: "Describe on the cluster",
    ApiKey.DESCRIBE_LOG_DIRS: "Describe on the cluster (else no dir listed, CLUSTER_AUTHORIZATION_FAILED v3+)",
    ApiKey.ALTER_REPLICA_LOG_DIRS: "Alter on the cluster (each partition refused)",
    ApiKey.DESCRIBE_CLIENT_QUOTAS: "DescribeConfigs on the cluster",
    ApiKey.ALTER_CLIENT_QUOTAS: "AlterConfigs on the cluster (each entry refused)",
}

# Served but not checked yet, said plainly: with an authorizer these still answer everyone.
NOT_YET_CHECKED: frozenset[int] = frozenset()


def build_authorizer(config: BrokerConfig) -> Authorizer | None:
    """The configured authorizer, None without one; ConfigError naming the key for a bad setting."""
    if not authorizer_enabled(config["authorizer.class.name"]):
        return None
    return Authorizer(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])


def client_ip(ctx: "RequestContext") -> str:
    """The client's address as Kafka's ACL hosts name it ("10.0.0.1", "::1"), from "ip:port"."""
    host = ctx.client_host.rpartition(":")[0] or ctx.client_host
    host = host.strip("[]")
    return host[7:] if host.startswith("::ffff:") and "." in host else host


def authorize(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType,
              name: str = CLUSTER_NAME) -> bool:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(ctx.session.principal, client_ip(ctx), operation, resource_type, name)


def authorize_cluster(ctx: "RequestContext", operation: AclOperation) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def allowed_names(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
    """The names (each decided once) the principal may do ``operation`` on."""
    unique = set(names)
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return unique
    principal, host = ctx.session.principal, client_ip(ctx)
    return {name for name in unique if authorizer.authorize(principal, host, operation, resource_type, name)}


def authorize_by_resource_type(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(ctx.session.principal, client_ip(ctx), operation, resource_type)


# Kafka's "not requested / not computed" value of authorized_operations fields.
OPERATIONS_NOT_REQUESTED = -2147483648


def authorized_operations(ctx: "RequestContext", resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """The resource's authorized_operations field: every operation of its type without an authorizer."""
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return sum(1 << operation for operation in RESOURCE_OPERATIONS[resource_type])
    return authorizer.authorized_operations(ctx.session.principal, client_ip(ctx), resource_type, name)


# Config resource types (ConfigResource.Type ids) and what guards them: Kafka's ConfigHelper/KafkaApis
# check broker, broker-logger and client-metrics configs on the cluster, topic and group configs on
# the topic or group, each refused with that resource's authorization error.
_CONFIG_GUARDS: dict[int, tuple[ResourceType, ErrorCode]] = {
    2: (ResourceType.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    4: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    8: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    16: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    32: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
}


def config_refusal(ctx: "RequestContext", operation: AclOperation, config_type: int, name: str) -> ErrorCode | None:
    """The error for a config resource the principal may not DescribeConfigs/AlterConfigs, None if it may
    (or the type is one Kafka rejects anyway, which the handler answers)."""
    guard = _CONFIG_GUARDS.get(config_type)
    if guard is None:
        return None
    resource_type, error = guard
    target = CLUSTER_NAME if resource_type is ResourceType.CLUSTER else name
    return None if authorize(ctx, operation, resource_type, target) else error
