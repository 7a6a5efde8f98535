"""Replicas lost with a broker's failed log dir (Kafka's KafkaController.processLogDirEventNotification,
onBrokerLogDirFailure and the KAFKA_STORAGE_ERROR handling of LeaderAndIsr responses, KIP-112).

A broker whose log dir fails writes ``/log_dir_event_notification/log_dir_event_<seq>`` (see
server/log_dir_events.py). The controller deletes the notifications and sends LeaderAndIsr for every
partition with a replica on the brokers named; a broker answers KAFKA_STORAGE_ERROR for the partitions
of its offline dirs. Any LeaderAndIsr answer saying so (also those of a failover, which is why a new
controller just deletes old notifications, as Kafka's does) marks those replicas offline in the context
until the broker registers again (a restart brings its dirs back). The offline election then treats
them as dead: they leave the ISR, and a partition they led gets another leader.
"""

from __future__ import annotations

import json
import logging
from typing import Callable

from pybroker.common.topic import TopicPartition
from pybroker.controller.context import ControllerContext
from pybroker.zk.events import ZkEvent
from pybroker.controller.partition_state import PartitionStateMachine
from pybroker.controller.requests import BrokerRequests
from pybroker.zk.client import ZkClient
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import LeaderAndIsrResponse
from pybroker.protocol.schema import Message

log = logging.getLogger("pybroker.controller")

LOG_DIR_EVENT = "log-dir-event"  # /log_dir_event_notification children
LOG_DIR_EVENTS = "/log_dir_event_notification"


def decode_log_dir_event(data: bytes) -> int:
    """The broker id of a notification (``{"version":1,"broker":1,"event":1}``)."""
    return int(json.loads(data)["broker"])


class LogDirFailures:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, requests: BrokerRequests,
                 partitions: PartitionStateMachine, epoch: Callable[[], int],
                 publish: Callable[[set[TopicPartition]], None]) -> None:
        self._ctx = ctx
        self._zk = zk
        self._requests = requests
        self._partitions = partitions
        self._epoch = epoch
        self._publish = publish  # LeaderAndIsr and UpdateMetadata for changed partitions

    async def start(self) -> None:
        """On failover: drop old notifications (the failover's LeaderAndIsr answers tell what is offline)
        and watch for new ones."""
        await self._zk.ensure_paths(LOG_DIR_EVENTS)  # a watch needs the node
        for name in await self._zk.children(LOG_DIR_EVENTS, watch=LOG_DIR_EVENT):
            await self._zk.delete(f"{LOG_DIR_EVENTS}/{name}")

    async def on_event(self, _: ZkEvent) -> None:
        """New notifications: ask the brokers they name about every replica they hold."""
        brokers = set()
        for name in await self._zk.children(LOG_DIR_EVENTS, watch=LOG_DIR_EVENT):
            path = f"{LOG_DIR_EVENTS}/{name}"
            found = await self._zk.get(path)
            if found is not None:
                try:
                    brokers.add(decode_log_dir_event(found[0]))
                except (ValueError, KeyError, TypeError):
                    log.warning("Ignoring unreadable log dir event notification %s", path)
            await self._zk.delete(path)
        for broker_id in sorted(brokers & set(self._ctx.brokers)):
            log.info("Broker %d reported a log dir failure; asking it for the state of its replicas", broker_id)
            keys = self._ctx.partitions_on({broker_id}) & set(self._ctx.states)
            self._requests.leader_and_isr(keys, {broker_id: self._ctx.brokers[broker_id]}, self._epoch())

    def on_response(self, broker_id: int, response: Message) -> set[TopicPartition]:
        """The partitions a LeaderAndIsr answer reports offline (KAFKA_STORAGE_ERROR)."""
        if not isinstance(response, LeaderAndIsrResponse):
            return set()
        names = {self._ctx.topic_id(topic): topic for topic in self._ctx.assignments}
        return {TopicPartition(names[topic.topic_id], p.partition_index)
                for topic in response.topics if topic.topic_id in names
                for p in topic.partition_errors if p.error_code == ErrorCode.KAFKA_STORAGE_ERROR}

    async def mark_offline(self, broker_id: int, keys: set[TopicPartition]) -> None:
        """Treat the replicas as dead (Kafka's onReplicasBecomeOffline) and elect around them."""
        if broker_id not in self._ctx.brokers or not self._ctx.mark_offline(broker_id, keys):
            return
        log.warning("Replicas of %s on broker %d are offline (failed log dir)",
                    ", ".join(f"{t}-{p}" for t, p in sorted(keys)), broker_id)
        changed = await self._partitions.elect_offline(self._ctx.electable())
        if changed:
            self._publish(changed)
