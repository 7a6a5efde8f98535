"""The controller's requests to brokers (Kafka's ControllerBrokerRequestBatch): LeaderAndIsr to the
replicas of changed partitions, UpdateMetadata to every live broker, StopReplica to replicas that
stop or go; each is built from the context and queued on the broker's ordered sender (channel.py).

UpdateMetadata is incremental, as Kafka's controller sends it: every live broker, and the states of the
partitions that changed (all of them after a failover and to a broker that just started); a deleted
topic's partitions go with leader -2 (Kafka's LeaderDuringDelete), which makes brokers drop them.
"""

from __future__ import annotations

import functools
from typing import Callable

from pybroker.common.listeners import SECURITY_PROTOCOL_IDS, Endpoint
from pybroker.common.topic import TopicPartition
from pybroker.zk import paths as zp
from pybroker.controller.channel import ControllerChannel
from pybroker.controller.context import ControllerContext
from pybroker.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from pybroker.protocol.schema import Message

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3

StopReplicas = dict[int, dict[str, list[StopReplicaRequest.StopReplicaPartitionState]]]  # by broker, topic


class BrokerRequests:
    def __init__(self, ctx: ControllerContext, channel: ControllerChannel, controller_id: int):
        self._ctx = ctx
        self._channel = channel
        self._controller_id = controller_id

    def leader_and_isr(self, keys: set[TopicPartition], brokers: dict[int, zp.BrokerRegistration], epoch: int, *,
                       is_new: bool = False) -> None:
        """The state of `keys` to each of their replicas among `brokers`."""
        ctx = self._ctx
        per_broker: dict[int, dict[str, list[LeaderAndIsrRequest.LeaderAndIsrPartitionState]]] = {}
        for key in sorted(keys):
            state = ctx.states.get(key)
            if state is None:
                continue
            replicas = ctx.replicas(key)
            move = ctx.reassignments.get(key)
            partition_state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                partition_index=key[1], controller_epoch=state.controller_epoch, leader=state.leader,
                leader_epoch=state.leader_epoch, isr=list(state.isr), partition_epoch=state.zk_version,
                replicas=list(replicas), adding_replicas=list(move.adding) if move else [],
                removing_replicas=list(move.removing) if move else [], is_new=is_new)
            for broker_id in replicas:
                if broker_id in brokers:
                    per_broker.setdefault(broker_id, {}).setdefault(key[0], []).append(partition_state)
        live_leaders = [LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=b.broker_id, host_name=b.host,
                                                                   port=b.port) for b in brokers.values()]
        for broker_id, topics in per_broker.items():
            request = LeaderAndIsrRequest(
                controller_id=self._controller_id, controller_epoch=epoch, broker_epoch=brokers[broker_id].epoch,
                type=0, live_leaders=live_leaders,
                topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name=topic, topic_id=ctx.topic_id(topic), partition_states=states)
                    for topic, states in topics.items()])
            self._channel.send(broker_id, request, LEADER_AND_ISR_VERSION, LeaderAndIsrResponse)

    def update_metadata(self, epoch: int, partitions: set[TopicPartition] | None = None, *,
                        to: set[int] | None = None, deleted: dict[str, list[int]] | None = None) -> None:
        """Every live broker and the state of `partitions` (every partition when None), plus the
        partitions of `deleted` topics (topic -> partition ids) marked for removal, to the live brokers
        in `to` (all when None)."""
        ctx = self._ctx
        live = set(ctx.brokers)
        brokers = [UpdateMetadataRequest.UpdateMetadataBroker(
            id=b.broker_id, rack=b.rack, endpoints=[UpdateMetadataRequest.UpdateMetadataEndpoint(
                port=e.port, host=e.host, listener=e.listener,
                security_protocol=SECURITY_PROTOCOL_IDS[e.security_protocol])
                for e in b.endpoints or (Endpoint("PLAINTEXT", b.host, b.port, "PLAINTEXT"),)])
            for b in sorted(ctx.brokers.values(), key=lambda b: b.broker_id)]
        by_topic: dict[str, list[UpdateMetadataRequest.UpdateMetadataPartitionState]] = {}
        keys = sorted(ctx.states) if partitions is None else sorted(k for k in partitions if k in ctx.states)
        for key in keys:
            topic, p = key
            if topic not in ctx.assignments or p not in ctx.assignments[topic].partitions:
                continue
            state, replicas = ctx.states[key], ctx.replicas(key)
            by_topic.setdefault(topic, []).append(UpdateMetadataRequest.UpdateMetadataPartitionState(
                partition_index=p, controller_epoch=state.controller_epoch, leader=state.leader,
                leader_epoch=state.leader_epoch, isr=list(state.isr), zk_version=state.zk_version,
                replicas=list(replicas),
                offline_replicas=[r for r in replicas if r not in live or r in ctx.offline_on(key)]))
        topics = [UpdateMetadataRequest.UpdateMetadataTopicState(
            topic_name=topic, topic_id=ctx.topic_id(topic), partition_states=states)
            for topic, states in sorted(by_topic.items())]
        topics += [UpdateMetadataRequest.UpdateMetadataTopicState(topic_name=topic, partition_states=[
            UpdateMetadataRequest.UpdateMetadataPartitionState(
                partition_index=p, controller_epoch=epoch, leader=zp.LEADER_DURING_DELETE, leader_epoch=-1, isr=[],
                zk_version=-1, replicas=[], offline_replicas=[]) for p in sorted(ids)])
            for topic, ids in sorted((deleted or {}).items())]
        for broker in ctx.brokers.values():
            if to is not None and broker.broker_id not in to:
                continue
            request = UpdateMetadataRequest(controller_id=self._controller_id, controller_epoch=epoch,
                                            broker_epoch=broker.epoch, live_brokers=brokers, topic_states=topics)
            self._channel.send(broker.broker_id, request, UPDATE_METADATA_VERSION, UpdateMetadataResponse)

    def stop_replicas(self, per_broker: StopReplicas, epoch: int,
                      on_response: Callable[[int, StopReplicaResponse | None], None] | None = None) -> None:
        """StopReplica to each live broker of `per_broker`; `on_response` gets each broker's answer (None:
        the request was skipped after an unexpected failure)."""
        for broker_id, topics in per_broker.items():
            broker = self._ctx.brokers.get(broker_id)
            if broker is not None:
                request = StopReplicaRequest(
                    controller_id=self._controller_id, controller_epoch=epoch, broker_epoch=broker.epoch,
                    topic_states=[StopReplicaRequest.StopReplicaTopicState(topic_name=t, partition_states=p)
                                  for t, p in topics.items()])
                callback = None if on_response is None else functools.partial(_answered, on_response, broker_id)
                self._channel.send(broker_id, request, STOP_REPLICA_VERSION, StopReplicaResponse, callback)


def _answered(on_response: Callable[[int, StopReplicaResponse | None], None], broker_id: int,
              response: Message | None) -> None:
    on_response(broker_id, response if isinstance(response, StopReplicaResponse) else None)
