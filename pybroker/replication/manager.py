"""The partitions this broker hosts: their roles, appends, reads and long-poll wake-ups.

Fetches that find too little data wait on `wait_for_append`; every append to a partition wakes
the waiters registered on it, and they re-read (Kafka's delayed-fetch purgatory in miniature).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Iterable

from pybroker.log.config import LogConfig
from pybroker.log.log import AppendInfo, PartitionLog
from pybroker.log.manager import LogManager
from pybroker.replication.errors import NotLeaderError, UnknownPartitionError
from pybroker.replication.partition import Partition

TopicPartitionKey = tuple[str, int]


class ReplicaManager:
    def __init__(self, log_manager: LogManager, broker_id: int):
        self.log_manager = log_manager
        self.broker_id = broker_id
        self._partitions: dict[TopicPartitionKey, Partition] = {}
        self._waiters: dict[TopicPartitionKey, set[asyncio.Future[None]]] = {}

    def partition(self, topic: str, index: int) -> Partition:
        partition = self._partitions.get((topic, index))
        if partition is None:
            raise UnknownPartitionError(f"This server does not host this topic-partition: {topic}-{index}")
        return partition

    def leader_partition(self, topic: str, index: int) -> Partition:
        partition = self.partition(topic, index)
        if not partition.is_leader:
            raise NotLeaderError(f"Broker {self.broker_id} is not the leader of {topic}-{index}")
        return partition

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def become_leader(self, topic: str, index: int, topic_id: uuid.UUID, *, leader_epoch: int,
                      replicas: tuple[int, ...], isr: tuple[int, ...], config: LogConfig,
                      min_insync_replicas: int) -> Partition:
        key = (topic, index)
        partition = self._partitions.get(key)
        if partition is None:
            log = self.log_manager.get_or_create_log(topic, index, config, topic_id)
            partition = Partition(topic, index, topic_id, log, self.broker_id, self.broker_id, leader_epoch,
                                  replicas, isr, min_insync_replicas)
            self._partitions[key] = partition
        else:
            partition.leader_id = self.broker_id
            partition.leader_epoch = leader_epoch
            partition.replicas, partition.isr = replicas, isr
            partition.min_insync_replicas = min_insync_replicas
            partition.log.update_config(config)
        if isr == (self.broker_id,):
            partition.log.set_high_watermark(partition.log.log_end_offset)
        return partition

    def update_config(self, topic: str, config: LogConfig, min_insync_replicas: int) -> None:
        for (name, _), partition in self._partitions.items():
            if name == topic:
                partition.log.update_config(config)
                partition.min_insync_replicas = min_insync_replicas

    def remove_topic(self, topic: str) -> None:
        for key in [key for key in self._partitions if key[0] == topic]:
            self._partitions.pop(key)
            self.log_manager.delete_log(*key)
            self._wake(key)

    def append(self, topic: str, index: int, batch: bytearray, *, required_acks: int, now_ms: int) -> AppendInfo:
        partition = self.leader_partition(topic, index)
        info = partition.append_as_leader(batch, required_acks=required_acks, now_ms=now_ms)
        if not info.duplicate:
            self._wake((topic, index))
        return info

    def log(self, topic: str, index: int) -> PartitionLog:
        return self.leader_partition(topic, index).log

    async def wait_for_append(self, keys: Iterable[TopicPartitionKey], timeout_s: float) -> None:
        """Return after the first append to any of `keys`, or after `timeout_s`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        registered = list(keys)
        for key in registered:
            self._waiters.setdefault(key, set()).add(future)
        try:
            await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for key in registered:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[key]

    def _wake(self, key: TopicPartitionKey) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(None)
