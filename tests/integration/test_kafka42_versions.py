"""What Kafka 4.2's new request versions ask of a broker, answered on the wire as Kafka answers them: ListOffsets
v11's EARLIEST_PENDING_UPLOAD, DescribeGroups v6's GROUP_ID_NOT_FOUND, DescribeCluster v2's IsFenced, ListTransactions
v2's TransactionalIdPattern, ListConfigResources v1's resource types, AlterPartitionReassignments v1's
AllowReplicationFactorChange, Metadata v13's top-level error code, OffsetCommit/OffsetFetch v10's topic ids and OffsetFetch v9's member check."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic
from tests.integration.test_bad_input import WireClient

TOPIC = "v42-topic"


@pytest.fixture(scope="module")
def client(shared_broker: BrokerProcess) -> Iterator[WireClient]:
    create_topic(shared_broker.bootstrap, TOPIC, partitions=1)
    wire = WireClient(shared_broker.bootstrap)
    yield wire
    wire.close()


def test_list_offsets_v11_earliest_pending_upload_is_no_offset_without_tiered_storage(client: WireClient) -> None:
    def ask(timestamp: int) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
        request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
        return client.request(request, 11, ListOffsetsResponse).topics[0].partitions[0]

    pending = ask(-6)
    assert (pending.error_code, pending.offset, pending.timestamp, pending.leader_epoch) == (0, -1, -1, -1)
    assert (ask(-2).error_code, ask(-2).offset) == (0, 0)


def test_describe_groups_v6_says_an_unknown_group_is_not_found(client: WireClient) -> None:
    def described() -> DescribeGroupsResponse.DescribedGroup | None:  # once the group coordinator is loaded
        client.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["no-such-group"]), 4,
                       FindCoordinatorResponse)
        [group] = client.request(DescribeGroupsRequest(groups=["no-such-group"]), 6, DescribeGroupsResponse).groups
        loading = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return None if group.error_code in loading else group

    v6 = eventually(described, "the group coordinator")
    assert (v6.error_code, v6.error_message, v6.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                                 "Group no-such-group not found.", "Dead")
    [v5] = client.request(DescribeGroupsRequest(groups=["no-such-group"]), 5, DescribeGroupsResponse).groups
    assert (v5.error_code, v5.group_state) == (0, "Dead")


def test_describe_cluster_v2_lists_no_fenced_broker(client: WireClient) -> None:
    answer = client.request(DescribeClusterRequest(include_fenced_brokers=True), 2, DescribeClusterResponse)
    assert answer.error_code == 0
    assert [(b.broker_id, b.is_fenced) for b in answer.brokers] == [(0, False)]


def test_describe_cluster_for_controllers_or_an_unknown_endpoint_type_is_refused_as_kafka_refuses_it(
        client: WireClient) -> None:
    """KIP-919: a broker is not a controller endpoint (the Java Admin's MismatchedEndpointTypeException)."""
    controllers = client.request(DescribeClusterRequest(endpoint_type=2), 1, DescribeClusterResponse)
    assert (controllers.error_code, controllers.brokers) == (ErrorCode.MISMATCHED_ENDPOINT_TYPE, [])
    unknown = client.request(DescribeClusterRequest(endpoint_type=7), 2, DescribeClusterResponse)
    assert (unknown.error_code, unknown.error_message) == (ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                                           "Unsupported endpoint type 7")
    assert client.request(DescribeClusterRequest(endpoint_type=1), 1, DescribeClusterResponse).error_code == 0


def test_list_transactions_v2_filters_by_pattern_and_refuses_an_invalid_one(client: WireClient) -> None:
    for transactional_id in ("orders-1", "orders-2", "payments-1"):
        eventually(lambda: client.request(InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1), 5,
            InitProducerIdResponse).error_code == 0, f"InitProducerId of {transactional_id}")

    def listed(pattern: str | None) -> tuple[int, list[str]]:
        answer = client.request(ListTransactionsRequest(transactional_id_pattern=pattern), 2, ListTransactionsResponse)
        return answer.error_code, sorted(s.transactional_id for s in answer.transaction_states)

    assert listed("orders-.*") == (0, ["orders-1", "orders-2"])
    assert listed("orders") == (0, [])  # the whole id must match
    assert listed(None) == (0, ["orders-1", "orders-2", "payments-1"])
    assert listed("orders-(") == (ErrorCode.INVALID_REGULAR_EXPRESSION, [])


def test_list_config_resources_v1_lists_the_types_asked(client: WireClient) -> None:
    def listed(types: list[int], version: int = 1) -> tuple[int, list[tuple[int, str]]]:
        answer = client.request(ListConfigResourcesRequest(resource_types=types), version, ListConfigResourcesResponse)
        return answer.error_code, [(r.resource_type, r.resource_name) for r in answer.config_resources]

    code, topics = listed([2])
    assert code == 0 and (2, TOPIC) in topics and {t for t, _ in topics} == {2}  # internal topics too, as Kafka
    code, brokers_then_topics = listed([4, 2])
    assert code == 0 and brokers_then_topics[0] == (4, "0") and (2, TOPIC) in brokers_then_topics
    code, everything = listed([])
    assert code == 0 and {(2, TOPIC), (4, "0")} <= set(everything)
    assert listed([8]) == (ErrorCode.UNSUPPORTED_VERSION, [])  # broker loggers have no configs here
    assert listed([], version=0) == (0, [])  # v0: client-metrics subscriptions only, of which there are none


def test_alter_partition_reassignments_v1_may_refuse_a_replication_factor_change(client: WireClient) -> None:
    def reassign(allow: bool) -> AlterPartitionReassignmentsResponse:
        request = AlterPartitionReassignmentsRequest(allow_replication_factor_change=allow, topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(name=TOPIC, partitions=[
                AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=[0, 1])])])
        return client.request(request, 1, AlterPartitionReassignmentsResponse)

    refused = reassign(False)
    result = refused.responses[0].partitions[0]
    assert (refused.allow_replication_factor_change, result.error_code, result.error_message) == (
        False, ErrorCode.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 1 to 2")
    allowed = reassign(True).responses[0].partitions[0]
    assert allowed.error_code != ErrorCode.INVALID_REPLICATION_FACTOR  # refused for its own reason: no broker 1


def test_metadata_v13_has_a_top_level_error_code(client: WireClient) -> None:
    answer = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 13,
                            MetadataResponse)
    assert (answer.error_code, [t.name for t in answer.topics]) == (0, [TOPIC])


def test_offset_commit_and_fetch_v10_name_topics_by_id(client: WireClient) -> None:
    metadata = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12,
                              MetadataResponse)
    topic_id, unknown_id = metadata.topics[0].topic_id, uuid.uuid4()

    def commit() -> OffsetCommitResponse | None:
        answer = client.request(OffsetCommitRequest(group_id="v10-group", generation_id_or_member_epoch=-1, topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(topic_id=tid, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=42)])
            for tid in (topic_id, unknown_id)]), 10, OffsetCommitResponse)
        codes = {p.error_code for t in answer.topics for p in t.partitions}
        return None if codes & {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS} else answer

    committed = eventually(commit, "the group coordinator")
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in committed.topics] == [
        (topic_id, [0]), (unknown_id, [ErrorCode.UNKNOWN_TOPIC_ID])]
    fetched = client.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id="v10-group", topics=[OffsetFetchRequest.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=[0])
                                      for tid in (topic_id, unknown_id)])]), 10, OffsetFetchResponse).groups[0]
    assert [(t.topic_id, [(p.committed_offset, p.error_code) for p in t.partitions]) for t in fetched.topics] == [
        (topic_id, [(42, 0)]), (unknown_id, [(-1, ErrorCode.UNKNOWN_TOPIC_ID)])]
    every = client.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id="v10-group", topics=None)]), 10, OffsetFetchResponse).groups[0]
    assert [(t.topic_id, t.name) for t in every.topics] == [(topic_id, "")]  # v10 carries ids, no names


def test_offset_fetch_v9_checks_a_consumer_group_member_and_its_epoch(client: WireClient) -> None:
    """KIP-848 (Kafka's ConsumerGroup.validateOffsetFetch): a member of a consumer group reads the offsets only at
    its current epoch; an unknown member is UNKNOWN_MEMBER_ID, another epoch STALE_MEMBER_EPOCH, and no member id
    with epoch -1 (admin clients) is not checked."""
    group, member_id = "fetch-848", str(uuid.uuid4())

    def join() -> ConsumerGroupHeartbeatResponse | None:
        answer = client.request(ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=[TOPIC], topic_partitions=[]), 0, ConsumerGroupHeartbeatResponse)
        loading = answer.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return None if loading else answer

    joined = eventually(join, "the group coordinator")
    assert (joined.error_code, joined.member_id) == (0, member_id)
    epoch = joined.member_epoch
    committed = client.request(OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)])]),
        9, OffsetCommitResponse)
    assert [p.error_code for t in committed.topics for p in t.partitions] == [0]

    def fetch(member: str | None, member_epoch: int) -> tuple[int, list[int]]:
        answer = client.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, member_id=member, member_epoch=member_epoch, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0])])]),
            9, OffsetFetchResponse).groups[0]
        return answer.error_code, [p.committed_offset for t in answer.topics for p in t.partitions]

    assert fetch(member_id, epoch) == (0, [7])
    assert fetch(member_id, epoch - 1) == (ErrorCode.STALE_MEMBER_EPOCH, [])
    assert fetch(member_id, epoch + 1) == (ErrorCode.STALE_MEMBER_EPOCH, [])
    assert fetch(str(uuid.uuid4()), epoch) == (ErrorCode.UNKNOWN_MEMBER_ID, [])
    assert fetch(None, -1) == (0, [7])


def test_join_group_v9_tells_a_restarted_static_leader_to_lead_and_skip_the_assignment(client: WireClient) -> None:
    """KIP-814 (JoinGroup v9, what the Java client sends): the static leader of a Stable group restarts (a new member
    id for its instance id), is told it leads, with the members, and to skip the assignment; its SyncGroup gets the
    assignment it had and the group's generation stays."""
    group = "static-leader"
    join = JoinGroupRequest(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
                            group_instance_id="instance-a", protocol_type="consumer", protocols=[
                                JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"subscription")])

    def joined() -> JoinGroupResponse | None:
        answer = client.request(join, 9, JoinGroupResponse)
        return answer if answer.error_code == 0 else None

    first = eventually(joined, "the group coordinator")
    assert first is not None and (first.leader, first.skip_assignment) == (first.member_id, False)
    synced = client.request(SyncGroupRequest(
        group_id=group, generation_id=first.generation_id, member_id=first.member_id, group_instance_id="instance-a",
        protocol_type="consumer", protocol_name="range", assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=first.member_id, assignment=b"assigned")]), 5, SyncGroupResponse)
    assert (synced.error_code, synced.assignment) == (0, b"assigned")
    again = client.request(join, 9, JoinGroupResponse)  # restarted: no member id
    assert (again.error_code, again.generation_id, again.skip_assignment) == (0, first.generation_id, True)
    assert again.leader == again.member_id != first.member_id
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in again.members] == [
        (again.member_id, "instance-a", b"subscription")]
    kept = client.request(SyncGroupRequest(group_id=group, generation_id=again.generation_id, member_id=again.member_id,
                                           group_instance_id="instance-a", protocol_type="consumer",
                                           protocol_name="range"), 5, SyncGroupResponse)
    assert (kept.error_code, kept.assignment) == (0, b"assigned")
