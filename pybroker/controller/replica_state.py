"""Replica transitions (Kafka's ReplicaStateMachine) that the brokers must be told of with StopReplica;
pure: they read the context and return what to send, by broker and topic.

Kafka tracks each replica's state (NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionStarted,
NonExistentReplica ...); here it follows from the context (a replica is online while its broker is
registered and the partition assigned to it), so only the transitions that need a request are kept:
OnlineReplica -> OfflineReplica (a broker in controlled shutdown stops fetching, keeping its log) and
-> ReplicaDeletionStarted (a deleted topic, or a replica a reassignment removed: stop and delete).
The ISR side of OfflineReplica is `election.controlled_shutdown_election`.
"""

from __future__ import annotations

from pybroker.common.topic import TopicPartition
from pybroker.controller.context import ControllerContext
from pybroker.controller.requests import StopReplicas
from pybroker.protocol.messages import StopReplicaRequest

NO_LEADER_EPOCH = -2  # a partition without a state: delete whatever epoch the replica has


def offline_followers(ctx: ControllerContext, broker_id: int) -> StopReplicas:
    """`broker_id`'s replicas that it does not lead stop fetching (it is shutting down), logs kept."""
    topics: dict[str, list[StopReplicaRequest.StopReplicaPartitionState]] = {}
    for (topic, p), state in sorted(ctx.states.items()):
        if broker_id in ctx.assignments[topic].partitions[p] and state.leader != broker_id:
            topics.setdefault(topic, []).append(StopReplicaRequest.StopReplicaPartitionState(
                partition_index=p, leader_epoch=state.leader_epoch, delete_partition=False))
    return {broker_id: topics} if topics else {}


def deleted_topic_replicas(ctx: ControllerContext, topic: str) -> StopReplicas:
    """Every replica of a deleted topic stops and deletes its log."""
    per_broker: StopReplicas = {}
    for p, replicas in ctx.assignments[topic].partitions.items():
        state = ctx.states.get(TopicPartition(topic, p))
        for broker_id in replicas:
            per_broker.setdefault(broker_id, {}).setdefault(topic, []).append(
                StopReplicaRequest.StopReplicaPartitionState(
                    partition_index=p, leader_epoch=NO_LEADER_EPOCH if state is None else state.leader_epoch,
                    delete_partition=True))
    return per_broker


def removed_replicas(ctx: ControllerContext, key: TopicPartition, dropped: tuple[int, ...]) -> StopReplicas:
    """The replicas a finished (or cancelled) reassignment dropped stop and delete their log."""
    state = ctx.states[key]
    return {broker_id: {key[0]: [StopReplicaRequest.StopReplicaPartitionState(
        partition_index=key[1], leader_epoch=state.leader_epoch, delete_partition=True)]} for broker_id in dropped}
