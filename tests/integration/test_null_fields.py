"""Every API the broker advertises, at every version it advertises, answers without a null where Kafka has none.

Kafka's specs mark many arrays and structs `nullableVersions`, but Kafka's brokers fill them (empty when there is
nothing to say) and Kafka's clients dereference them: kafka-clients 3.9's admin failed with a NullPointerException
on DescribeTopicPartitions' EligibleLeaderReplicas when pybroker sent null there. This test builds a request for each
advertised (API, version) from the request schema itself (one element in every array of structs, values taken from
a topic with records, a stable group and an open transaction), with a few per-API adjustments, so a newly served API
is covered without editing the test. It sends each with our codecs to the real broker, decodes the answer and walks
every field: a null array, struct, bytes or records field fails unless ALLOWED_NULLS names it with the reason Kafka
leaves it null too. Null strings are a separate audit (empty versus null) and are not checked here.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


from pybroker.client.consumer_protocol import encode_assignment, encode_subscription
from pybroker.common.topic import TopicPartition
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.errors import DecodeError
from pybroker.protocol.messages import (
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DescribeTopicPartitionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    ProduceRequest,
    ProduceResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from pybroker.protocol.schema import PRIMITIVE_TYPES, ZERO_UUID, FieldSpec, Message, Struct, resolve_struct
from pybroker.records.record import RecordInput, build_batch
from pybroker.server.inter_broker_guard import GUARDED
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

TOPIC = "nulls"
GROUP = "nulls-group"
TRANSACTIONAL_ID = "nulls-txn"


@dataclass(frozen=True)
class Scene:
    """The state the requests refer to: a topic with records, a stable group with one member, an open transaction."""

    topic_id: uuid.UUID
    member_id: str
    generation: int
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class AllowedNull:
    """A null Kafka's broker sends too; `when(request, owner)` narrows it to the case Kafka sends it in."""

    reason: str
    when: Callable[[Any, Any], bool] = lambda request, owner: True


ALLOWED_NULLS: dict[tuple[int, str], AllowedNull] = {
    (ApiKey.FETCH, "Responses[].Partitions[].AbortedTransactions"): AllowedNull(
        "LocalLog.read collects aborted transactions only for read_committed; read_uncommitted answers null",
        lambda request, owner: request.isolation_level == 0),
    (ApiKey.FETCH, "Responses[].Partitions[].Records"): AllowedNull(
        "FetchResponse.partitionResponse(partition, error) leaves Records null on a partition with an error",
        lambda request, owner: owner.error_code != 0),
    (ApiKey.DESCRIBE_CLIENT_QUOTAS, "Entries"): AllowedNull(
        "DescribeClientQuotasRequest.getErrorResponse sets Entries to null with the error",
        lambda request, owner: owner.error_code != 0),
    (ApiKey.DESCRIBE_TOPIC_PARTITIONS, "NextCursor"): AllowedNull(
        "KRaftMetadataCache sets NextCursor only when a partition was left out of the answer"),
    (ApiKey.CONSUMER_GROUP_HEARTBEAT, "Assignment"): AllowedNull(
        "consumerGroupHeartbeat sets Assignment only on a (re)join or a change; an error answer carries none",
        lambda request, owner: owner.error_code != 0 or request.member_epoch != 0),
    (ApiKey.SHARE_GROUP_HEARTBEAT, "Assignment"): AllowedNull(
        "shareGroupHeartbeat, as consumerGroupHeartbeat, sets Assignment only on a (re)join or a change",
        lambda request, owner: owner.error_code != 0 or request.member_epoch != 0),
}

BATCH = build_batch([RecordInput(b"k%d" % i, b"v%d" % i) for i in range(3)])
SUBSCRIPTION = encode_subscription([TOPIC])
ASSIGNMENT = encode_assignment([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])

# Values of primitive fields by Kafka field name; a primitive not named here keeps its default.
VALUES: dict[str, Callable[[Scene], Any]] = {
    "Name": lambda s: TOPIC, "Topic": lambda s: TOPIC, "TopicName": lambda s: TOPIC, "ResourceName": lambda s: TOPIC,
    "TopicId": lambda s: s.topic_id, "ResourceType": lambda s: 2,
    "Partitions": lambda s: [0, 1], "PartitionIndexes": lambda s: [0, 1],
    "GroupId": lambda s: GROUP, "Key": lambda s: GROUP, "CoordinatorKeys": lambda s: [GROUP],
    "Groups": lambda s: [GROUP], "MemberId": lambda s: s.member_id, "GenerationId": lambda s: s.generation,
    "GenerationIdOrMemberEpoch": lambda s: s.generation,
    "ProtocolType": lambda s: "consumer", "ProtocolName": lambda s: "range",
    "Metadata": lambda s: SUBSCRIPTION, "Assignment": lambda s: ASSIGNMENT,
    "SessionTimeoutMs": lambda s: 60000, "RebalanceTimeoutMs": lambda s: 60000,
    "TransactionalId": lambda s: TRANSACTIONAL_ID, "V3AndBelowTransactionalId": lambda s: TRANSACTIONAL_ID,
    "TransactionalIds": lambda s: [TRANSACTIONAL_ID], "TransactionTimeoutMs": lambda s: 60000,
    "ProducerId": lambda s: s.producer_id, "V3AndBelowProducerId": lambda s: s.producer_id,
    "ProducerEpoch": lambda s: s.producer_epoch, "V3AndBelowProducerEpoch": lambda s: s.producer_epoch,
    "Records": lambda s: BATCH, "Acks": lambda s: -1, "TimeoutMs": lambda s: 10000, "timeoutMs": lambda s: 10000,
    "MaxWaitMs": lambda s: 0, "MaxBytes": lambda s: 1 << 20, "PartitionMaxBytes": lambda s: 1 << 20,
    "Timestamp": lambda s: -1, "CommittedOffset": lambda s: 1,
    "NumPartitions": lambda s: 1, "ReplicationFactor": lambda s: 1, "Count": lambda s: 3,
    "ValidateOnly": lambda s: True, "IncludeSynonyms": lambda s: True, "IncludeDocumentation": lambda s: True,
    "ClientSoftwareName": lambda s: "pybroker-tests", "ClientSoftwareVersion": lambda s: "1.0",
}
# Values by (struct class, field name), for names that mean something else inside that struct.
STRUCT_VALUES: dict[tuple[str, str], Any] = {
    ("CreatableTopicConfig", "Name"): "retention.ms", ("CreatableTopicConfig", "Value"): "3600000",
    ("AlterableConfig", "Name"): "retention.ms", ("AlterableConfig", "Value"): "3600000",
    ("JoinGroupRequestProtocol", "Name"): "range",
}


def _in(versions: tuple[int, int] | None, version: int) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def fill(cls: type[Struct], version: int, scene: Scene) -> Any:
    """An instance of `cls` whose fields at `version` hold representative values; arrays of structs get one element."""
    obj = cls()
    for spec in cls._SCHEMA:
        if not _in(spec.versions, version):
            continue
        elem = spec.type[2:] if spec.type.startswith("[]") else spec.type
        if elem not in PRIMITIVE_TYPES:
            value = fill(resolve_struct(cls, elem), version, scene)
            if spec.type.startswith("[]"):
                setattr(obj, spec.name, [value])
            elif not _in(spec.nullable, version):
                setattr(obj, spec.name, value)
        elif (cls.__name__, spec.kafka_name) in STRUCT_VALUES:
            setattr(obj, spec.name, STRUCT_VALUES[cls.__name__, spec.kafka_name])
        elif spec.kafka_name in VALUES:
            setattr(obj, spec.name, VALUES[spec.kafka_name](scene))
    return obj


# What a coordinator answers while it loads its partition; clients retry these.
LOADING = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}


def _once_loaded(client: WireClient, request: Any, version: int, response_class: type) -> Any:
    """The answer to a coordinator request, sent again while the coordinator's partition is loading."""
    return eventually(lambda: (answer := client.request(request, version, response_class)).error_code not in LOADING
                      and answer, f"{type(request).__name__} answered by a loaded coordinator")


def _join(client: WireClient, group: str) -> tuple[str, int]:
    """Join `group` as its only member (JoinGroup v5 asks for the member id first); its (member id, generation)."""
    request = JoinGroupRequest(group_id=group, session_timeout_ms=60000, rebalance_timeout_ms=60000,
                               protocol_type="consumer",
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                    metadata=SUBSCRIPTION)])
    first = _once_loaded(client, request, 5, JoinGroupResponse)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    request.member_id = first.member_id
    joined = client.request(request, 5, JoinGroupResponse)
    assert joined.error_code == ErrorCode.NONE, joined
    return joined.member_id, joined.generation_id


def _create_topic(client: WireClient, name: str, partitions: int) -> CreateTopicsResponse.CreatableTopicResult:
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10000), 7, CreateTopicsResponse)
    assert created.topics[0].error_code == ErrorCode.NONE, created
    return created.topics[0]


Override = Callable[[Any, int, Scene, WireClient], Any]


def _metadata(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    for topic in request.topics:
        topic.topic_id = ZERO_UUID  # topics are named; Kafka refuses Metadata by topic id
    request.allow_auto_topic_creation = False
    return request


def _produce(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    request.transactional_id = None  # the batch is not transactional
    return request


def _fetch(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    request.isolation_level = version % 2  # both: read_uncommitted may answer null AbortedTransactions, committed not
    request.forgotten_topics_data = []  # a full fetch without a session forgets nothing
    return request


def _init_producer_id(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    request.transactional_id = None  # a new idempotent producer, not a bump of the open transaction
    request.producer_id, request.producer_epoch = -1, -1
    return request


def _join_group(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    request.group_id, request.member_id = f"nulls-join-v{version}", ""
    if version >= 4:  # the first join only hands out the member id
        request.member_id = client.request(request, version, JoinGroupResponse).member_id
    return request


def _leave_group(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    request.group_id = f"nulls-leave-v{version}"
    request.member_id, _ = _join(client, request.group_id)
    request.members = [LeaveGroupRequest.MemberIdentity(member_id=request.member_id)]
    return request


def _create_topics(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    request.topics[0].name, request.topics[0].assignments = f"nulls-created-v{version}", []
    return request


def _delete_topics(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    name = f"nulls-deleted-v{version}"
    _create_topic(client, name, 1)
    request.topic_names = [name]
    request.topics = [DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=ZERO_UUID)]
    return request


def _create_partitions(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    request.topics[0].assignments = None  # the broker places the new partitions
    return request


def _describe_configs(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    request.resources[0].configuration_keys = None  # every config
    return request


def _delete_groups(request: Any, version: int, scene: Scene, client: WireClient) -> Any:
    group = f"nulls-deleted-v{version}"
    committed = client.request(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
        2, OffsetCommitResponse)
    assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE, committed
    request.groups_names = [group]
    return request


OVERRIDES: dict[int, Override] = {
    ApiKey.METADATA: _metadata,
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.JOIN_GROUP: _join_group,
    ApiKey.LEAVE_GROUP: _leave_group,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.DELETE_GROUPS: _delete_groups,
}


def nulls(message: Any, version: int, path: str = "") -> Iterator[tuple[str, Any, FieldSpec]]:
    """(path, owner, spec) of every null field at `version` in `message` and the structs inside it."""
    defaults = {f.name: f.default for f in dataclasses.fields(message)}
    for spec in type(message)._SCHEMA:
        if not _in(spec.versions, version):
            continue
        value = getattr(message, spec.name)
        where = path + spec.kafka_name
        elem = spec.type[2:] if spec.type.startswith("[]") else spec.type
        if value is None:
            if not (spec.tag is not None and _in(spec.tagged, version) and defaults[spec.name] is None):
                yield where, message, spec  # (an absent tagged field is its default, as from Kafka)
        elif elem not in PRIMITIVE_TYPES:
            for item in value if spec.type.startswith("[]") else [value]:
                yield from nulls(item, version, where + ("[]." if spec.type.startswith("[]") else "."))


def unexpected_nulls(api_key: int, version: int, request: Any, response: Any) -> list[str]:
    """Null arrays, structs, bytes and records in `response` that Kafka would not send null."""
    found = []
    for path, owner, spec in nulls(response, version):
        if spec.type == "string":
            continue
        allowed = ALLOWED_NULLS.get((api_key, path))
        if allowed is None or not allowed.when(request, owner):
            found.append(f"{ApiKey(api_key).name} v{version}: {path} is null")
    return found


def _scene(client: WireClient) -> Scene:
    topic = _create_topic(client, TOPIC, 2)
    produced = client.request(ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=p, records=BATCH) for p in (0, 1)])]),
        9, ProduceResponse)
    assert [p.error_code for p in produced.responses[0].partition_responses] == [ErrorCode.NONE] * 2, produced
    member_id, generation = _join(client, GROUP)
    synced = client.request(SyncGroupRequest(group_id=GROUP, generation_id=generation, member_id=member_id,
                                             assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                                 member_id=member_id, assignment=ASSIGNMENT)]), 3, SyncGroupResponse)
    assert synced.error_code == ErrorCode.NONE, synced
    producer = _once_loaded(client, InitProducerIdRequest(transactional_id=TRANSACTIONAL_ID,
                                                          transaction_timeout_ms=60000), 4, InitProducerIdResponse)
    assert producer.error_code == ErrorCode.NONE, producer
    return Scene(topic.topic_id, member_id, generation, producer.producer_id, producer.producer_epoch)


@dataclass(frozen=True)
class Answer:
    """One advertised (API, version): the request sent and the decoded answer, or why there is none."""

    api_key: int
    version: int
    request: Any
    response: Any | None
    failure: str | None


def advertised_answers(bootstrap: str) -> Iterator[Answer]:
    """Send a schema-built request for every (API, version) the broker advertises; the answers in order."""
    client = WireClient(bootstrap)
    try:
        advertised = client.request(ApiVersionsRequest(), 3, ApiVersionsResponse).api_keys
        scene = _scene(client)
        for key in advertised:
            for version in range(key.min_version, key.max_version + 1):
                request = fill(REQUEST_CLASSES[key.api_key], version, scene)
                request = OVERRIDES.get(key.api_key, lambda r, v, s, c: r)(request, version, scene, client)
                try:
                    response = client.request(request, version, RESPONSE_CLASSES[key.api_key])
                except (OSError, DecodeError) as e:  # e.g. the broker failed to encode a null non-nullable field
                    yield Answer(key.api_key, version, request, None, repr(e))
                    client.close()
                    client = WireClient(bootstrap)
                    continue
                yield Answer(key.api_key, version, request, response, None)
                if key.api_key in GUARDED:  # refused requests only brokers send close their connection
                    client.close()
                    client = WireClient(bootstrap)
    finally:
        client.close()


def test_no_advertised_api_answers_null_where_kafka_never_does(broker: BrokerProcess) -> None:
    found: list[str] = []
    for answer in advertised_answers(broker.bootstrap):
        if answer.failure is not None:
            found.append(f"{ApiKey(answer.api_key).name} v{answer.version}: no decodable answer ({answer.failure})")
        else:
            found += unexpected_nulls(answer.api_key, answer.version, answer.request, answer.response)
    assert found == []


def test_a_null_eligible_leader_replicas_list_is_reported() -> None:
    """The walker itself: Kafka's admin dereferences EligibleLeaderReplicas, so a null one must be caught."""
    partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition(
        eligible_leader_replicas=None, last_known_elr=[])
    topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic(name="t", partitions=[partition])
    response = DescribeTopicPartitionsResponse(topics=[topic])
    assert unexpected_nulls(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, None, response) == [
        "DESCRIBE_TOPIC_PARTITIONS v0: Topics[].Partitions[].EligibleLeaderReplicas is null"]
