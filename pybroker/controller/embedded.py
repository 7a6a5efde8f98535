"""Single-node metadata: topics, ids, partition counts and configs in one local JSON document.

File format (`pybroker-metadata.json` in the first log dir), rewritten whole on every change
through a temp file, fsync and rename, so a crash leaves either the old or the new document:

    {"version": 1, "cluster_id": "<22 chars>", "next_producer_id": 1000,
     "topics": {"<name>": {"topic_id": "<22 chars>", "partitions": 3, "configs": {"k": "v"}}}}

Every partition of every topic is led by this broker with leader epoch 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any, Callable, Mapping, Sequence

from pybroker.common.durable_json import write_json_durably, write_json_durably_off_loop
from pybroker.common.uncancellable import finishes_once_started
from pybroker.common.ids import LeaderEpoch, ProducerId
from pybroker.common.topic import new_topic_id, topic_id_from_string, topic_id_to_string, topic_name_error
from pybroker.controller.errors import (
    BrokerIdNotRegisteredError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicDeletionDisabledError,
    TopicExistsError,
    UnknownTopicError,
)
from pybroker.controller.election import check_assignment, check_replicas
from pybroker.controller.metadata import BrokerInfo, PartitionInfo, TopicInfo, TopicRegistry
from pybroker.zk.paths import ProducerIdBlock

METADATA_FILE = "pybroker-metadata.json"
PRODUCER_ID_BLOCK = 1000
MAX_PARTITIONS = 100_000


class EmbeddedMetadata(TopicRegistry):
    """`ClusterMetadata` for a one-broker cluster, persisted under `data_dir`."""

    def __init__(self, data_dir: str, broker: BrokerInfo, *,
                 validate_configs: Callable[[Mapping[str, str]], None],
                 delete_topic_enable: bool = True):
        self._path = os.path.join(data_dir, METADATA_FILE)
        self._broker = broker
        self._validate_configs = validate_configs
        self._delete_enabled = delete_topic_enable
        self._writes = asyncio.Lock()  # a write's checks, its file write and its in-memory change are one step
        super().__init__()
        self.controller_id = broker.broker_id
        self.cluster_id, self._next_producer_id = self._load()
        self._producer_id_limit = self._next_producer_id  # every id below it is reserved (and persisted)
        self._local_limit = self._next_producer_id  # the end of the block this broker hands out itself

    # Reads

    def brokers(self) -> Sequence[BrokerInfo]:
        return (self._broker,)

    async def wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Every write here is done when it returns (its leaders are this broker, a deleted topic is gone),
        whatever came after it (a topic created, then deleted by another request, was created)."""
        return True

    # Writes

    @finishes_once_started
    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str],
                           assignments: Mapping[int, Sequence[int]] | None = None,
                           *, validate_only: bool = False) -> TopicInfo:
        async with self._writes:
            error = topic_name_error(name)
            if error:
                raise InvalidTopicError(error)
            if name in self._topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            if assignments:
                num_partitions, replication_factor = check_assignment(assignments, {self._broker.broker_id})
            if num_partitions < 1 or num_partitions > MAX_PARTITIONS:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            if replication_factor < 1:
                raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
            if replication_factor > 1:
                raise InvalidReplicationFactorError(
                    f"Unable to replicate the partition {replication_factor} time(s): "
                    "The target replication factor of "
                    f"{replication_factor} cannot be reached because only 1 broker(s) are registered.")
            self._validate_configs(configs)
            info = self._topic_info(name, new_topic_id(), num_partitions, dict(configs))
            if not validate_only:
                await self._store(info)
            return info

    @finishes_once_started
    async def delete_topic(self, name: str) -> None:
        async with self._writes:
            if not self._delete_enabled:
                raise TopicDeletionDisabledError("Topic deletion is disabled.")
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(f"Topic '{name}' does not exist.")
            await self._save(topics={n: i for n, i in self._topics.items() if n != name})
            del self._topics[name]
            self._unindex(info)
            self._notify(name, None)

    @finishes_once_started
    async def create_partitions(self, name: str, total: int,
                                assignments: Sequence[Sequence[int]] | None = None,
                                *, validate_only: bool = False) -> TopicInfo:
        async with self._writes:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(f"Topic '{name}' does not exist.")
            current = len(info.partitions)
            if total <= current:
                raise InvalidPartitionsError(
                    f"Topic currently has {current} partitions, which is higher than the requested {total}.")
            if total > MAX_PARTITIONS:
                raise InvalidPartitionsError(f"Number of partitions must be at most {MAX_PARTITIONS}.")
            if assignments is not None:
                if len(assignments) != total - current:
                    raise InvalidReplicaAssignmentError(
                        f"Increasing the number of partitions by {total - current} but "
                        f"{len(assignments)} assignments provided.")
                for replicas in assignments:
                    check_replicas(replicas, {self._broker.broker_id})
            new_info = self._topic_info(name, info.topic_id, total, dict(info.configs))
            if not validate_only:
                await self._store(new_info)
            return new_info

    @finishes_once_started
    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        async with self._writes:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(f"Topic '{name}' does not exist.")
            self._validate_configs(configs)
            new_info = self._topic_info(name, info.topic_id, len(info.partitions), dict(configs))
            await self._store(new_info)
            return new_info

    @finishes_once_started
    async def allocate_producer_id(self) -> ProducerId:
        """Hand out ids from blocks reserved on disk first, so a restart never reuses one."""
        async with self._writes:
            if self._next_producer_id >= self._local_limit:
                self._next_producer_id = (await self._reserve_block()).start
                self._local_limit = self._producer_id_limit
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return ProducerId(producer_id)

    @finishes_once_started
    async def reserve_producer_id_block(self, broker_id: int) -> ProducerIdBlock:
        """AllocateProducerIds on a single node, which is its own controller: only this broker is
        registered, and its blocks come after every id reserved so far."""
        async with self._writes:
            if broker_id != self._broker.broker_id:
                raise BrokerIdNotRegisteredError(f"Broker {broker_id} is not registered")
            return await self._reserve_block()

    # Internals

    async def _reserve_block(self) -> ProducerIdBlock:
        start = self._producer_id_limit
        await self._save(producer_id_limit=start + PRODUCER_ID_BLOCK)
        self._producer_id_limit = start + PRODUCER_ID_BLOCK
        return ProducerIdBlock(self._broker.broker_id, start, self._producer_id_limit - 1)

    def _topic_info(self, name: str, topic_id: uuid.UUID, partitions: int, configs: dict[str, str]) -> TopicInfo:
        me = self._broker.broker_id
        return TopicInfo(
            name=name, topic_id=topic_id, configs=configs,
            partitions={p: PartitionInfo(p, (me,), me, LeaderEpoch(0), (me,)) for p in range(partitions)},
        )

    async def _store(self, info: TopicInfo) -> None:
        await self._save(topics={**self._topics, info.name: info})
        self._topics[info.name] = info
        self._index(info)
        self._notify(info.name, info)

    def _load(self) -> tuple[str, int]:
        try:
            with open(self._path, encoding="utf-8") as handle:
                document = json.load(handle)
        except FileNotFoundError:
            cluster_id = topic_id_to_string(new_topic_id())
            self.cluster_id, self._next_producer_id = cluster_id, 0
            self._producer_id_limit = 0
            write_json_durably(self._path, self._document())  # at construction, before anything is served
            return cluster_id, 0
        for name, entry in document["topics"].items():
            info = self._topic_info(name, topic_id_from_string(entry["topic_id"]), entry["partitions"],
                                    dict(entry.get("configs", {})))
            self._topics[name] = info
            self._index(info)
        return document["cluster_id"], document.get("next_producer_id", 0)

    async def _save(self, *, topics: Mapping[str, TopicInfo] | None = None,
                    producer_id_limit: int | None = None) -> None:
        """Persist the state with `topics` / `producer_id_limit` in place of the current ones, off the event
        loop. Callers hold `_writes` and change their in-memory state only after this returned: a failed
        write (a full disk) changes nothing, so the broker never serves a topic its metadata file does not hold."""
        await write_json_durably_off_loop(self._path, self._document(topics, producer_id_limit))

    def _document(self, topics: Mapping[str, TopicInfo] | None = None,
                  producer_id_limit: int | None = None) -> dict[str, Any]:
        return {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._producer_id_limit if producer_id_limit is None else producer_id_limit,
            "topics": {
                name: {"topic_id": topic_id_to_string(info.topic_id), "partitions": len(info.partitions),
                       "configs": dict(info.configs)}
                for name, info in sorted((self._topics if topics is None else topics).items())
            },
        }
