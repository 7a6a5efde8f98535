"""`pybroker topics --zookeeper`: the topic verbs straight against a ZooKeeper-mode cluster's znodes.

Kafka's old TopicCommand (AdminZkClient) never talked to a broker: it wrote `/config/topics/T` and
`/brokers/topics/T` itself and left leader election to the controller, which watches those paths;
deletion is a request znode `/admin/delete_topics/T` that the controller acts on. `ZkTopicAdmin`
does the same with the layout in `pybroker.zk.paths`, and offers the few methods of the
wire `AdminClient` that `pybroker.admin.topics` uses, so both modes share the command code and print
the same lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable, Mapping, Sequence, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError

from pybroker.common.progress import Progress
from pybroker.client.command_line import ClientSettings, CommandError
from pybroker.client import ConfigEntry, NewTopic, PartitionInfo, TopicDescription
from pybroker.client.admin import TopicResult
from pybroker.client.cluster import BrokerNode
from pybroker.client.errors import ResponseError
from pybroker.common.topic import INTERNAL_TOPICS, ZERO_UUID, new_topic_id, topic_id_from_string, topic_id_to_string
from pybroker.common.topic import topic_name_error
from pybroker.common.metadata_errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    MetadataError,
    TopicExistsError,
    UnknownTopicError,
)
from pybroker.common.placement import assign_replicas, check_assignment, plan_added_partitions
from pybroker.protocol.error_codes import ErrorCode
from pybroker.zk import paths as zp
from pybroker.zk.client import ZkClient

T = TypeVar("T")

SESSION_TIMEOUT_MS = 30000
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' source of a topic override
#: The codes a broker would answer for the failures these znode writes can meet (the server's error mapping).
ERROR_CODES: dict[type[MetadataError], ErrorCode] = {
    TopicExistsError: ErrorCode.TOPIC_ALREADY_EXISTS,
    UnknownTopicError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    InvalidTopicError: ErrorCode.INVALID_TOPIC_EXCEPTION,
    InvalidPartitionsError: ErrorCode.INVALID_PARTITIONS,
    InvalidReplicationFactorError: ErrorCode.INVALID_REPLICATION_FACTOR,
    InvalidReplicaAssignmentError: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
}


def run_zk_admin(settings: ClientSettings, operation: Callable[["ZkTopicAdmin"], Awaitable[T]]) -> T:
    """Run ``operation`` with a ZooKeeper session to ``settings.zookeeper``, closed afterwards."""

    for name in ("kazoo", "pybroker.zookeeper"):  # the tool reports failures in its own one line
        quiet = logging.getLogger(name)
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False

    async def go() -> T:
        assert settings.zookeeper is not None
        timeout_ms = int(settings.timeout_s * 1000)
        zk = ZkClient(settings.zookeeper, session_timeout_ms=SESSION_TIMEOUT_MS, connection_timeout_ms=timeout_ms)
        try:
            await zk.start()
        except KazooTimeoutError:
            await zk.stop()
            raise CommandError(f"Timed out waiting for connection to ZooKeeper at {settings.zookeeper}") from None
        try:
            return await operation(ZkTopicAdmin(zk))
        finally:
            await zk.stop()

    return asyncio.run(go())


class ZkTopicAdmin:
    """The `AdminClient` methods the topic command needs, answered from and written to ZooKeeper."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        names = await self._zk.children(zp.BROKER_TOPICS)
        return sorted(n for n in names if include_internal or n not in INTERNAL_TOPICS)

    async def describe_cluster(self) -> list[BrokerNode]:
        registrations = await self._zk.broker_registrations()
        return [BrokerNode(b.broker_id, b.host, b.port, b.rack) for _, b in sorted(registrations.items())]

    async def describe_topics(self, names: Sequence[str]) -> dict[str, TopicDescription]:
        """Assignments, then each partition's state znode: one ZooKeeper read per partition."""
        assignments = {name: await self._assignment(name) for name in names}
        described = {}
        total = sum(len(a.partitions) for a in assignments.values())
        with Progress("Reading partition states", total, "partitions") as progress:
            for name, assignment in assignments.items():
                partitions = []
                for index, replicas in sorted(assignment.partitions.items()):
                    node = await self._zk.get(zp.partition_state_path(name, index))
                    state = zp.decode_partition_state(node[0], node[1].version) if node is not None else None
                    leader = state.leader if state is not None and state.leader != zp.NO_LEADER else None
                    partitions.append(PartitionInfo(index, leader, tuple(replicas), tuple(state.isr) if state else ()))
                    progress.advance()
                topic_id = topic_id_from_string(assignment.topic_id) if assignment.topic_id else ZERO_UUID
                described[name] = TopicDescription(name, topic_id, name in INTERNAL_TOPICS, tuple(partitions))
        return described

    async def describe_topic_configs(self, names: Sequence[str]) -> dict[str, list[ConfigEntry]]:
        """Only the topics' overrides: defaults live in the brokers' configs, which ZooKeeper does not hold."""
        configs = {}
        for name in names:
            node = await self._zk.get(zp.topic_config_path(name))
            overrides = zp.decode_topic_config(node[0]) if node is not None else {}
            configs[name] = [ConfigEntry(k, v, DYNAMIC_TOPIC_CONFIG, is_default=False)
                             for k, v in sorted(overrides.items())]
        return configs

    async def create_topics(self, topics: Sequence[NewTopic]) -> dict[str, TopicResult]:
        return {topic.name: await self._outcome(topic.name, self._create(topic)) for topic in topics}

    async def create_partitions(self, totals: Mapping[str, int],
                                assignments: Mapping[str, Sequence[Sequence[int]]] | None = None
                                ) -> dict[str, TopicResult]:
        return {name: await self._outcome(name, self._add_partitions(name, total, (assignments or {}).get(name)))
                for name, total in totals.items()}

    async def marked_for_deletion(self) -> set[str]:
        """The topics named in /admin/delete_topics: queued, their deletion not complete (Kafka's
        isTopicMarkedForDeletion)."""
        return set(await self._zk.children(zp.DELETE_TOPICS))

    async def delete_topics(self, names: Sequence[str]) -> dict[str, TopicResult]:
        return {name: await self._outcome(name, self._mark_for_deletion(name)) for name in names}

    async def _outcome(self, name: str, work: Awaitable[None]) -> TopicResult:
        try:
            await work
        except MetadataError as exc:
            return TopicResult(name, ResponseError(ERROR_CODES.get(type(exc), ErrorCode.UNKNOWN_SERVER_ERROR), str(exc)))
        return TopicResult(name)

    async def _create(self, topic: NewTopic) -> None:
        error = topic_name_error(topic.name)
        if error:
            raise InvalidTopicError(error)
        if await self._zk.get(zp.topic_path(topic.name)) is not None:
            raise TopicExistsError(f"Topic '{topic.name}' already exists.")
        brokers = await self._registered_brokers()
        if topic.replica_assignment:
            plan = {p: tuple(r) for p, r in topic.replica_assignment.items()}
            check_assignment(plan, {b for b, _ in brokers})
        else:
            if topic.num_partitions < 1 or topic.replication_factor < 1:
                raise CommandError("--partitions and --replication-factor are required with --zookeeper "
                                   "unless --replica-assignment is given")
            plan = assign_replicas(brokers, topic.num_partitions, topic.replication_factor)
        transaction = self._zk.transaction()
        transaction.create(zp.topic_config_path(topic.name), zp.encode_topic_config(topic.configs))
        transaction.create(zp.topic_path(topic.name), zp.encode_topic(plan, topic_id_to_string(new_topic_id())))
        try:
            await self._zk.commit(transaction)
        except NodeExistsError:
            raise TopicExistsError(f"Topic '{topic.name}' already exists.") from None

    async def _add_partitions(self, name: str, total: int, added_replicas: Sequence[Sequence[int]] | None) -> None:
        node = await self._zk.get(zp.topic_path(name))
        if node is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        current = zp.decode_topic(node[0])
        added = plan_added_partitions(current.partitions, total, added_replicas, await self._registered_brokers())
        try:
            await self._zk.set(zp.topic_path(name), zp.encode_topic({**current.partitions, **added},
                                                                    current.topic_id or ""), node[1].version)
        except BadVersionError:
            raise InvalidPartitionsError(f"Topic '{name}' changed while adding partitions; try again.") from None

    async def _mark_for_deletion(self, name: str) -> None:
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"Topic {name} is a kafka internal topic and is not allowed to be marked for "
                                    "deletion.")
        await self._assignment(name)
        with contextlib.suppress(NodeExistsError):
            await self._zk.create(zp.delete_topic_path(name), makepath=True)

    async def _assignment(self, name: str) -> zp.TopicAssignment:
        node = await self._zk.get(zp.topic_path(name))
        if node is None:
            raise CommandError(f"Topic '{name}' does not exist as expected")
        return zp.decode_topic(node[0])

    async def _registered_brokers(self) -> list[tuple[int, str | None]]:
        return [(b.node_id, b.rack) for b in await self.describe_cluster()]

