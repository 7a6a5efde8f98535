"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46).

As in ZooKeeper-mode Kafka the controller executes them: admin clients send them to the broker that
Metadata names as controller, and any other broker answers NOT_CONTROLLER so the client re-routes.

A single-node broker is a cluster of one and answers as a one-node Kafka 3.9 without ZooKeeper (KRaft's
ReplicationControlManager) does, with its per-partition codes and messages: it is the only (so the
preferred) replica and the leader of everything, so elections are never needed; the only valid
reassignment target is this broker alone, which is already every partition's replica set, so a
reassignment to it completes at once and none is ever in progress.

With an authorizer, ElectLeaders and AlterPartitionReassignments need Alter on the cluster and
ListPartitionReassignments Describe, refused with CLUSTER_AUTHORIZATION_FAILED (Kafka's message names
the request's Java form, which has no equivalent here: none is sent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from pybroker.common.topic import TopicPartition
from pybroker.controller.election import ElectionOutcome, ElectionType
from pybroker.controller.errors import InvalidReplicationFactorError, NoReassignmentInProgressError, NotControllerError
from pybroker.controller.metadata import TopicInfo
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server.registry import api

if TYPE_CHECKING:
    from pybroker.controller.controller import ZkController

PartitionAnswer = tuple[int, str | None]  # error code, error message

_ELECTION_ERRORS = {
    ElectionOutcome.ELECTED: ErrorCode.NONE,
    ElectionOutcome.NOT_NEEDED: ErrorCode.ELECTION_NOT_NEEDED,
    ElectionOutcome.PREFERRED_NOT_AVAILABLE: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ElectionOutcome.NO_ELIGIBLE_LEADER: ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ElectionOutcome.UNKNOWN_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ElectionOutcome.TOPIC_BEING_DELETED: ErrorCode.INVALID_TOPIC_EXCEPTION,
}
_ELECTION_MESSAGES = {ElectionOutcome.TOPIC_BEING_DELETED: "The topic is being deleted"}  # Kafka's words


def _controller(ctx: RequestContext) -> ZkController | None:
    zk_mode = ctx.services.zk_mode
    return zk_mode.controller if zk_mode is not None else None


def _single_node_elections(topics: Mapping[str, TopicInfo],
                           requested: list[ElectLeadersRequest.TopicPartitions] | None
                           ) -> list[ElectLeadersResponse.ReplicaElectionResult]:
    """KRaft's `electLeaders`: one result per requested topic entry; for "every partition" (None) each topic
    is listed without the partitions that already have the wanted leader, which on one node is all of them."""
    if requested is None:
        return [ElectLeadersResponse.ReplicaElectionResult(topic=name, partition_result=[]) for name in topics]
    return [ElectLeadersResponse.ReplicaElectionResult(topic=entry.topic, partition_result=[
        ElectLeadersResponse.PartitionResult(partition_id=partition, error_code=code, error_message=message)
        for partition in entry.partitions
        for code, message in [_single_node_election(topics, entry.topic, partition)]]) for entry in requested]


def _single_node_election(topics: Mapping[str, TopicInfo], topic: str, partition: int) -> PartitionAnswer:
    if topic not in topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    if partition not in topics[topic].partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition}"
    return ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.ELECTION_NOT_NEEDED.message


async def _cluster_elections(controller: ZkController, election_type: ElectionType,
                             partitions: list[TopicPartition] | None
                             ) -> list[ElectLeadersResponse.ReplicaElectionResult]:
    outcomes = await controller.elect_leaders(election_type, partitions)
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for (topic, partition), outcome in outcomes.items():
        code = _ELECTION_ERRORS[outcome]
        by_topic.setdefault(topic, []).append(ElectLeadersResponse.PartitionResult(
            partition_id=partition, error_code=code,
            error_message=None if code == ErrorCode.NONE else _ELECTION_MESSAGES.get(outcome, ErrorCode(code).message)))
    return [ElectLeadersResponse.ReplicaElectionResult(topic=topic, partition_result=results)
            for topic, results in by_topic.items()]


@api(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    election_type = request.election_type  # v0 has no field: its default is PREFERRED
    if not authorize_cluster(ctx, AclOperation.ALTER):  # Kafka: the top level and each named partition
        return ElectLeadersResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=t.topic, partition_result=[
                ElectLeadersResponse.PartitionResult(partition_id=p, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                for p in t.partitions]) for t in request.topic_partitions or []])
    if election_type not in {kind.value for kind in ElectionType}:
        return ElectLeadersResponse(error_code=ErrorCode.INVALID_REQUEST)
    controller = _controller(ctx)
    if controller is None:
        return ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=_single_node_elections(
            ctx.services.metadata.topics(), request.topic_partitions))
    partitions = None if request.topic_partitions is None else \
        [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    try:
        results = await _cluster_elections(controller, ElectionType(election_type), partitions)
    except NotControllerError:
        return ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER)
    return ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=results)


def _single_node_reassignment(topics: Mapping[str, TopicInfo], registered: set[int], topic: str, partition: int,
                              target: Sequence[int] | None) -> PartitionAnswer:
    """KRaft's `alterPartitionReassignment` checks, in its order and words; a target that passes them
    is this broker alone, the partition's replica set already: nothing to move."""
    if topic not in topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
    if partition not in topics[topic].partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{partition}."
    if target is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS.message
    problem = _manual_assignment_problem(target, registered)
    if problem is not None:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
    return ErrorCode.NONE, None


def _manual_assignment_problem(target: Sequence[int], registered: set[int]) -> str | None:
    """Kafka's `validateManualPartitionAssignment`: brokers are checked in id order, so with several
    faults the lowest broker id decides which one is reported."""
    if not target:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(target):
        if broker_id not in registered:
            return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {broker_id} more than once."
        previous = broker_id
    return None


def _reassignment_code(exc: Exception) -> int:
    return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS if isinstance(exc, NoReassignmentInProgressError) \
        else error_code_for(exc)


def _replication_factor_changes(ctx: RequestContext, request: AlterPartitionReassignmentsRequest
                                ) -> dict[TopicPartition, str]:
    """v1's AllowReplicationFactorChange=false: the reassignments that would change a partition's replica count,
    refused with Kafka's message (INVALID_REPLICATION_FACTOR)."""
    if request.allow_replication_factor_change:
        return {}
    topics = ctx.services.metadata.topics()
    refused = {}
    for topic in request.topics:
        info = topics.get(topic.name)
        for p in topic.partitions:
            current = info.partitions.get(p.partition_index) if info is not None else None
            if p.replicas is not None and current is not None and len(p.replicas) != len(current.replicas):
                refused[TopicPartition(topic.name, p.partition_index)] = (
                    f"The replication factor is changed from {len(current.replicas)} to {len(p.replicas)}")
    return refused


@api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1)
async def alter_partition_reassignments(ctx: RequestContext, request: AlterPartitionReassignmentsRequest
                                        ) -> AlterPartitionReassignmentsResponse:
    response = await _alter_partition_reassignments(ctx, request)
    response.allow_replication_factor_change = request.allow_replication_factor_change  # v1 echoes it
    return response


async def _alter_partition_reassignments(ctx: RequestContext, request: AlterPartitionReassignmentsRequest
                                         ) -> AlterPartitionReassignmentsResponse:
    if not authorize_cluster(ctx, AclOperation.ALTER):  # Kafka's getErrorResponse: the top level and each partition
        return AlterPartitionReassignmentsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, responses=[
            AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=t.name, partitions=[
                AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
                    partition_index=p.partition_index, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                for p in t.partitions]) for t in request.topics])
    controller = _controller(ctx)
    refused = _replication_factor_changes(ctx, request)
    if controller is None:
        return _alter_single_node(ctx, request, refused)
    targets = {tp: None if p.replicas is None else tuple(p.replicas)
               for t in request.topics for p in t.partitions
               if (tp := TopicPartition(t.name, p.partition_index)) not in refused}
    try:
        results: dict[TopicPartition, Exception | None] = await controller.alter_reassignments(targets) \
            if targets else {}
    except NotControllerError:
        return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)
    results.update((key, InvalidReplicationFactorError(message)) for key, message in refused.items())
    by_topic: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append(AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
            partition_index=partition, error_code=ErrorCode.NONE if error is None else _reassignment_code(error),
            error_message=None if error is None else error_message_for(error)))
    return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NONE, error_message=None, responses=[
        AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=topic, partitions=partitions)
        for topic, partitions in by_topic.items()])


def _alter_single_node(ctx: RequestContext, request: AlterPartitionReassignmentsRequest,
                       refused: dict[TopicPartition, str]) -> AlterPartitionReassignmentsResponse:
    metadata = ctx.services.metadata
    topics, registered = metadata.topics(), {broker.broker_id for broker in metadata.brokers()}
    responses = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            rf_change = refused.get(TopicPartition(topic.name, partition.partition_index))
            code, message = (ErrorCode.INVALID_REPLICATION_FACTOR, rf_change) if rf_change is not None else \
                _single_node_reassignment(topics, registered, topic.name, partition.partition_index,
                                          partition.replicas)
            partitions.append(AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
                partition_index=partition.partition_index, error_code=code, error_message=message))
        responses.append(AlterPartitionReassignmentsResponse.ReassignableTopicResponse(
            name=topic.name, partitions=partitions))
    return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NONE, error_message=None, responses=responses)


@api(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, request: ListPartitionReassignmentsRequest
                                       ) -> ListPartitionReassignmentsResponse:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    controller = _controller(ctx)
    if controller is None:
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.NONE, error_message=None, topics=[])
    partitions = None if request.topics is None else \
        [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
    try:
        moves = controller.list_reassignments(partitions)
    except NotControllerError:
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)
    by_topic: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
    for (topic, partition), move in moves.items():
        by_topic.setdefault(topic, []).append(ListPartitionReassignmentsResponse.OngoingPartitionReassignment(
            partition_index=partition, replicas=list(move.replicas), adding_replicas=list(move.adding),
            removing_replicas=list(move.removing)))
    return ListPartitionReassignmentsResponse(error_code=ErrorCode.NONE, error_message=None, topics=[
        ListPartitionReassignmentsResponse.OngoingTopicReassignment(name=topic, partitions=partitions)
        for topic, partitions in by_topic.items()])
