"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46).

As in ZooKeeper-mode Kafka the controller executes them: admin clients send them to the broker that
Metadata names as controller, and any other broker answers NOT_CONTROLLER so the client re-routes.
A single-node broker has no controller: it is the only (so the preferred) replica of everything,
elections are never needed and no reassignment can run.
"""

from __future__ import annotations

from pybroker.controller.controller import NotControllerError, ZkController
from pybroker.controller.election import ElectionOutcome, ElectionType
from pybroker.controller.errors import NoReassignmentInProgressError
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
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server.registry import api

PartitionKey = tuple[str, int]
SINGLE_NODE_MESSAGE = "Partition reassignment needs a cluster (zookeeper.connect); this broker runs alone."

_ELECTION_ERRORS = {
    ElectionOutcome.ELECTED: ErrorCode.NONE,
    ElectionOutcome.NOT_NEEDED: ErrorCode.ELECTION_NOT_NEEDED,
    ElectionOutcome.PREFERRED_NOT_AVAILABLE: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ElectionOutcome.NO_ELIGIBLE_LEADER: ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ElectionOutcome.UNKNOWN_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


def _controller(ctx: RequestContext) -> ZkController | None:
    zk_mode = ctx.broker.zk_mode
    return zk_mode.controller if zk_mode is not None else None


def _single_node_elections(ctx: RequestContext, partitions: list[PartitionKey] | None
                           ) -> dict[PartitionKey, ElectionOutcome]:
    topics = ctx.broker.metadata.topics()
    if partitions is None:
        partitions = [(name, p) for name, info in topics.items() for p in info.partitions]
    return {(name, p): ElectionOutcome.NOT_NEEDED if name in topics and p in topics[name].partitions
            else ElectionOutcome.UNKNOWN_PARTITION for name, p in partitions}


@api(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    election_type = request.election_type  # v0 has no field: its default is PREFERRED
    if election_type not in {kind.value for kind in ElectionType}:
        return ElectLeadersResponse(error_code=ErrorCode.INVALID_REQUEST)
    partitions = None if request.topic_partitions is None else \
        [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    controller = _controller(ctx)
    if controller is None:
        outcomes = _single_node_elections(ctx, partitions)
    else:
        try:
            outcomes = await controller.elect_leaders(ElectionType(election_type), partitions)
        except NotControllerError:
            return ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER)
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for (topic, partition), outcome in outcomes.items():
        code = _ELECTION_ERRORS[outcome]
        by_topic.setdefault(topic, []).append(ElectLeadersResponse.PartitionResult(
            partition_id=partition, error_code=code,
            error_message=None if code == ErrorCode.NONE else ErrorCode(code).message))
    return ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=[
        ElectLeadersResponse.ReplicaElectionResult(topic=topic, partition_result=results)
        for topic, results in by_topic.items()])


def _reassignment_code(exc: Exception) -> int:
    return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS if isinstance(exc, NoReassignmentInProgressError) \
        else error_code_for(exc)


@api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0)
async def alter_partition_reassignments(ctx: RequestContext, request: AlterPartitionReassignmentsRequest
                                        ) -> AlterPartitionReassignmentsResponse:
    controller = _controller(ctx)
    if controller is None:
        return AlterPartitionReassignmentsResponse(error_code=ErrorCode.INVALID_REQUEST,
                                                   error_message=SINGLE_NODE_MESSAGE)
    targets = {(t.name, p.partition_index): None if p.replicas is None else tuple(p.replicas)
               for t in request.topics for p in t.partitions}
    try:
        results = await controller.alter_reassignments(targets)
    except NotControllerError:
        return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)
    by_topic: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append(AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
            partition_index=partition, error_code=ErrorCode.NONE if error is None else _reassignment_code(error),
            error_message=None if error is None else error_message_for(error)))
    return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NONE, error_message=None, responses=[
        AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=topic, partitions=partitions)
        for topic, partitions in by_topic.items()])


@api(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, request: ListPartitionReassignmentsRequest
                                       ) -> ListPartitionReassignmentsResponse:
    controller = _controller(ctx)
    if controller is None:
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.NONE, error_message=None, topics=[])
    partitions = None if request.topics is None else \
        [(t.name, p) for t in request.topics for p in t.partition_indexes]
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
