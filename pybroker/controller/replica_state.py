"""Replica transitions (Kafka's ReplicaStateMachine) that the brokers must be told of with StopReplica;
pure: they read the context and return what to send, by broker and topic.

Kafka tracks each replica's state (NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionStarted,
NonExistentReplica ...); here it follows from the context (a replica is online while its broker is
registered and the partition assigned to it), so only the transitions that need a request are kept:
OnlineReplica -> OfflineReplica (a broker in controlled shutdown stops fetching, keeping its log) and
-> ReplicaDeletionStarted for a replica a reassignment removed (stop and delete). The ISR side of
OfflineReplica is `election.controlled_shutdown_election`; a deleted topic's replicas go through the
deletion states in topic_deletion.py.
"""

from __future__ import annotations

from pybroker.common.topic import TopicPartition
from pybroker.controller.context import ControllerContext
from pybroker.controller.requests import StopReplicas
from pybroker.protocol.messages import StopReplicaRequest

def offline_followers(ctx: ControllerContext, broker_id: int) -> StopReplicas:
    """`broker_id`'s replicas that it does not lead stop fetching (it is shutting down), logs kept."""
    topics: dict[str, list[StopReplicaRequest.StopReplicaPartitionState]] = {}
    for (topic, p), state in sorted(ctx.states.items()):
        if broker_id in ctx.assignments[topic].partitions[p] and state.leader != broker_id:
            topics.setdefault(topic, []).append(StopReplicaRequest.StopReplicaPartitionState(
                partition_index=p, leader_epoch=state.leader_epoch, delete_partition=False))
    return {broker_id: topics} if topics else {}


def removed_replicas(ctx: ControllerContext, key: TopicPartition, dropped: tuple[int, ...]) -> StopReplicas:
    """The replicas a finished (or cancelled) reassignment dropped stop and delete their log."""
    state = ctx.states[key]
    return {broker_id: {key[0]: [StopReplicaRequest.StopReplicaPartitionState(
        partition_index=key[1], leader_epoch=state.leader_epoch, delete_partition=True)]} for broker_id in dropped}
