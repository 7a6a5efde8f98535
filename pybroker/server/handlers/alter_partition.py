"""AlterPartition (56, v0-3; KIP-497): leaders send their ISR changes to the controller, which checks
and writes them (controller/alter_partition.py). Answered by the active controller in a cluster
(NOT_CONTROLLER elsewhere); a single node, its own controller, checks proposals against its one-replica
partitions, whose ISR cannot change."""

from __future__ import annotations

from pybroker.common.topic import TopicPartition
from pybroker.zk import paths as zp
from pybroker.controller.alter_partition import RECOVERED, IsrProposal, check_proposal
from pybroker.controller.context import ControllerContext
from pybroker.controller.errors import NotControllerError, StaleBrokerEpochError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.registry import api

TOPIC_IDS_VERSION = 2
BROKER_EPOCHS_VERSION = 3

Outcome = ErrorCode | zp.LeaderAndIsr


@api(ApiKey.ALTER_PARTITION, 0, 3)
async def alter_partition(ctx: RequestContext, request: AlterPartitionRequest) -> AlterPartitionResponse:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return AlterPartitionResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    zk_mode = ctx.services.zk_mode
    controller = zk_mode.controller if zk_mode is not None else None
    if zk_mode is not None and (controller is None or not controller.active):
        return AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    by_id = ctx.api_version >= TOPIC_IDS_VERSION
    proposals: list[IsrProposal] = []
    outcomes: dict[tuple[int, int], Outcome] = {}  # (topic position, partition position) -> early answer
    for t, topic in enumerate(request.topics):
        metadata = ctx.services.metadata
        info = metadata.topic_by_id(topic.topic_id) if by_id else metadata.topic(topic.topic_name)
        for p, partition in enumerate(topic.partitions):
            if info is None:
                outcomes[(t, p)] = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            with_epochs = ctx.api_version >= BROKER_EPOCHS_VERSION
            isr = tuple(b.broker_id for b in partition.new_isr_with_epochs) if with_epochs else tuple(partition.new_isr)
            proposals.append(IsrProposal(
                TopicPartition(info.name, partition.partition_index), partition.leader_epoch, isr,
                partition.partition_epoch,
                tuple(b.broker_epoch for b in partition.new_isr_with_epochs) if with_epochs else None,
                partition.leader_recovery_state if ctx.api_version >= 1 else RECOVERED))
    try:
        if controller is not None:
            results = await controller.alter_partition(request.broker_id, request.broker_epoch, proposals)
        else:
            single = _single_node_context(ctx)
            if request.broker_id not in single.brokers:
                return AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, topics=[])
            results = [check_proposal(single, request.broker_id, proposal) for proposal in proposals]
    except NotControllerError:
        return AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    except StaleBrokerEpochError:
        return AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, topics=[])
    answered = iter(results)
    topics = []
    for t, topic in enumerate(request.topics):
        partitions = []
        for p, partition in enumerate(topic.partitions):
            outcome = outcomes[(t, p)] if (t, p) in outcomes else next(answered)
            partitions.append(_partition_answer(partition.partition_index, outcome))
        topics.append(AlterPartitionResponse.TopicData(topic_name=topic.topic_name, topic_id=topic.topic_id,
                                                       partitions=partitions))
    return AlterPartitionResponse(error_code=0, topics=topics)


def _partition_answer(index: int, outcome: Outcome) -> AlterPartitionResponse.PartitionData:
    if isinstance(outcome, ErrorCode):
        return AlterPartitionResponse.PartitionData(partition_index=index, error_code=outcome, leader_id=-1,
                                                    leader_epoch=-1, isr=[], partition_epoch=-1)
    return AlterPartitionResponse.PartitionData(partition_index=index, error_code=0, leader_id=outcome.leader,
                                                leader_epoch=outcome.leader_epoch, isr=list(outcome.isr),
                                                leader_recovery_state=RECOVERED, partition_epoch=outcome.zk_version)


def _single_node_context(ctx: RequestContext) -> ControllerContext:
    """The one-broker cluster as a controller would see it: every partition led by this broker alone,
    at partition epoch 0."""
    me = ctx.services.broker_id
    single = ControllerContext(brokers={me: zp.BrokerRegistration(me, "", 0, None)})
    for name, info in ctx.services.metadata.topics().items():
        single.assignments[name] = zp.TopicAssignment({p: i.replicas for p, i in info.partitions.items()}, None)
        for p, i in info.partitions.items():
            single.states[TopicPartition(name, p)] = zp.LeaderAndIsr(i.leader, i.leader_epoch, i.isr, 0, 0)
    return single
