"""`ClusterMetadata` of a broker in a ZooKeeper cluster.

Reads come from a cache the controller fills with UpdateMetadata (`apply_update`), plus topic
configs read from /config/topics and refreshed on /config/changes notifications. Writes go to
ZooKeeper the way Kafka's AdminZkClient makes them (create /brokers/topics/T, create
/admin/delete_topics/T, ...) and return: the controller's reaction reaches this broker's cache later, and
whoever needs it waits for it with `wait_until` (the admin requests, up to their timeout_ms, as Kafka's
delayed topic operations do). A write, once started, ends whoever stops waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Callable, Iterable, Mapping, Sequence

from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, OperationTimeoutError
from kazoo.protocol.states import ZnodeStat

from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.common.ids import LeaderEpoch, ProducerId
from pybroker.common.uncancellable import finishes_once_started
from pybroker.common.topic import ZERO_UUID, new_topic_id, topic_id_to_string, topic_name_error
from pybroker.zk import paths as zp
from pybroker.controller.config_changes import ConfigChangeFeed, announce_config_change
from pybroker.controller.election import assign_replicas, check_assignment, plan_added_partitions
from pybroker.controller.embedded import MAX_PARTITIONS
from pybroker.controller.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicDeletionDisabledError,
    TopicExistsError,
    UnknownTopicError,
)
from pybroker.common.listeners import SECURITY_PROTOCOL_NAMES, Endpoint
from pybroker.controller.metadata import BrokerInfo, PartitionInfo, TopicInfo, TopicRegistry
from pybroker.controller.producer_ids import ProducerIdBlocks, ProducerIdsUnavailableError
from pybroker.zk.client import ZkClient, ZkEvent
from pybroker.protocol.messages import UpdateMetadataRequest

log = logging.getLogger("pybroker.metadata")

REGISTRATION_RETRY_S = 0.5  # how soon a registration ZooKeeper did not take is tried again



class ZkMetadata(TopicRegistry):
    def __init__(self, zk: ZkClient, me: BrokerInfo, *, validate_configs: Callable[[Mapping[str, str]], None],
                 delete_topic_enable: bool = True, inter_broker_listener: str = "PLAINTEXT",
                 producer_ids: ProducerIdBlocks | None = None, clock: Clock = SYSTEM_CLOCK):
        """``producer_ids`` hands out ids from blocks the controller allocates (AllocateProducerIds). ``clock``:
        the broker's, which the registration's retries and the waits for a metadata change wait on."""
        self._zk = zk
        self._clock = clock
        self._me = me
        self._listener = inter_broker_listener  # other brokers are reached on its endpoints
        self._validate_configs = validate_configs
        self._delete_enabled = delete_topic_enable
        super().__init__()
        self._brokers: dict[int, BrokerInfo] = {me.broker_id: me}
        self._configs: dict[str, dict[str, str]] = {}
        self._changed = asyncio.Event()
        self._config_changes = ConfigChangeFeed(zk, "config-changes")
        self._producer_ids = producer_ids
        self.cluster_id = ""
        self._controller_id = -1
        self.controller_epoch = 0
        self.broker_epoch = -1  # the czxid of this broker's registration znode
        self._started_epoch: int | None = None  # the czxid of this process's first registration
        zk.on("config-changes", self._on_config_changes)
        zk.on("controller-id", self._on_controller_id)

    async def start(self, *, registration_wait_s: float) -> None:
        """Create Kafka's persistent paths and the cluster id, then register this broker."""
        await self._zk.ensure_paths(*zp.PERSISTENT_PATHS)
        self.cluster_id = await self._cluster_id()
        await self._config_changes.start()
        await self._on_controller_id(ZkEvent("controller-id"))
        await self.register(registration_wait_s)
        await self._brokers_from_zookeeper()

    async def register(self, wait_s: float) -> None:
        """Create /brokers/ids/N. After a crash the previous session's node lingers until ZooKeeper
        expires it, so wait for that (up to the session timeout) as a restarted Kafka broker must."""
        me = self._me
        path = zp.broker_path(me.broker_id)
        data = zp.encode_broker(me.host, me.port, me.rack, self._clock.wall_ms(), me.endpoints,
                                started_epoch=self._started_epoch)
        deadline = self._clock.monotonic() + wait_s
        while True:
            try:
                node = await self._registration(path, data)
            except (ConnectionLoss, OperationTimeoutError):
                await self._clock.sleep(REGISTRATION_RETRY_S)  # the session may still be alive (an expiry raises)
                continue
            if node is None:  # another session's node: a previous run of this broker, until it expires
                if self._clock.monotonic() >= deadline:
                    raise RuntimeError(f"Broker id {me.broker_id} is already registered in ZooKeeper "
                                       f"(another broker is using it)")
                await self._clock.sleep(REGISTRATION_RETRY_S)
                continue
            self.broker_epoch = node[1].czxid
            if self._started_epoch is None:
                self._started_epoch = self.broker_epoch
            log.info("Registered broker %d at path %s with broker epoch %d", me.broker_id, path, self.broker_epoch)
            return

    async def _registration(self, path: str, data: bytes) -> tuple[bytes, ZnodeStat] | None:
        """This session's registration node, created if needed; None while another session holds it. A
        create whose answer was lost with the connection made the node of this session: it is ours
        (Kafka's checkedEphemeralCreate compares the ephemeral owner too)."""
        with contextlib.suppress(NodeExistsError):
            await self._zk.create(path, data, ephemeral=True)
        node = await self._zk.get(path)
        return node if node is not None and node[1].ephemeralOwner == self._zk.session_id else None

    async def _cluster_id(self) -> str:
        node = await self._zk.get(zp.CLUSTER_ID)
        if node is None:
            with contextlib.suppress(NodeExistsError):
                await self._zk.create(zp.CLUSTER_ID, zp.encode_cluster_id(topic_id_to_string(new_topic_id())),
                                      makepath=True)
            node = await self._zk.get(zp.CLUSTER_ID)
            assert node is not None
        return zp.decode_cluster_id(node[0])

    # Reads

    @property
    def controller_id(self) -> int:
        """The controller, or -1 while it is unknown or not yet among the brokers this broker can
        name: clients then refresh metadata instead of waiting for a broker they cannot reach."""
        return self._controller_id if self._controller_id in self._brokers else -1

    def brokers(self) -> Sequence[BrokerInfo]:
        return [self._brokers[b] for b in sorted(self._brokers)]

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    # The controller's view arrives here

    async def apply_update(self, request: UpdateMetadataRequest) -> None:
        """Merge the controller's update into the cache, as Kafka's metadata cache does: the live brokers
        are replaced; each partition state in the request replaces that partition's, one with leader -2
        (LeaderDuringDelete) removes it, and a topic goes with its last partition. A topic named with
        another topic id than the cached one was re-created: its old partitions go.

        The configs of topics new to this broker are read from ZooKeeper first; the merge after them
        runs without a pause, so an update handled meanwhile on another connection (another
        controller's) is never overwritten by this one's older view, and one from a controller deposed
        meanwhile is dropped, as Kafka's cache applies updates one at a time under its lock."""
        configs = {topic.topic_name: await self.configs_for(topic.topic_name) for topic in request.topic_states}
        if request.controller_epoch < self.controller_epoch:
            self._forget_configs_of_absent(configs)
            return
        self.controller_epoch, self._controller_id = request.controller_epoch, request.controller_id
        brokers = {}
        for broker in request.live_brokers:
            endpoints = tuple(Endpoint(e.listener, e.host, e.port, SECURITY_PROTOCOL_NAMES.get(e.security_protocol, ""))
                              for e in broker.endpoints)
            inter_broker = next((e for e in endpoints if e.listener == self._listener), endpoints[0])
            brokers[broker.id] = BrokerInfo(broker.id, inter_broker.host, inter_broker.port, broker.rack, endpoints)
        self._brokers = brokers or {self._me.broker_id: self._me}
        topics = dict(self._topics)
        removed: list[str] = []
        changed: list[TopicInfo] = []
        for topic in request.topic_states:
            name = topic.topic_name
            previous = topics.get(name)
            recreated = previous is not None and topic.topic_id != ZERO_UUID and previous.topic_id != topic.topic_id
            partitions = dict(previous.partitions) if previous is not None and not recreated else {}
            for p in topic.partition_states:
                if p.leader == zp.LEADER_DURING_DELETE:
                    partitions.pop(p.partition_index, None)
                else:
                    partitions[p.partition_index] = PartitionInfo(
                        p.partition_index, tuple(p.replicas), p.leader, LeaderEpoch(p.leader_epoch), tuple(p.isr),
                        tuple(p.offline_replicas))
            if not partitions:
                if previous is not None:
                    del topics[name]
                    removed.append(name)
                continue
            topic_id = previous.topic_id if topic.topic_id == ZERO_UUID and previous is not None else topic.topic_id
            info = TopicInfo(name, topic_id, partitions, configs[name])
            # An unchanged topic keeps its object, so answers cached for it stay valid (metadata_cache.py).
            if previous != info:
                topics[name] = info
                changed.append(info)
        self._topics = topics
        self._index_all(topics)
        self._forget_configs_of_absent(configs)
        for name in removed:
            self._notify(name, None)
        for info in changed:
            self._notify(info.name, info)
        self._changed.set()
        self._changed = asyncio.Event()

    def _forget_configs_of_absent(self, names: Iterable[str]) -> None:
        """Drop the configs read for topics the cache does not hold: config changes are followed only
        for the topics it holds, so a copy kept for another could be stale when that topic arrives."""
        for name in names:
            if name not in self._topics:
                self._configs.pop(name, None)

    async def configs_for(self, topic: str) -> Mapping[str, str]:
        """A topic's config overrides, also before the controller's metadata about it arrived."""
        if topic not in self._configs:
            self._configs[topic] = await self._read_configs(topic)
        return self._configs[topic]

    async def _on_controller_id(self, _: ZkEvent) -> None:
        """Follow /controller directly too: when the controller dies, clients see "no controller"
        (and keep refreshing metadata) instead of a dead broker until the next one's UpdateMetadata."""
        node = await self._zk.get(zp.CONTROLLER, watch="controller-id")
        self._controller_id = zp.decode_controller(node[0]) if node else -1

    async def _read_configs(self, topic: str) -> dict[str, str]:
        node = await self._zk.get(zp.topic_config_path(topic))
        return zp.decode_topic_config(node[0]) if node else {}

    async def _on_config_changes(self, _: ZkEvent) -> None:
        for kind, topic in await self._config_changes.new_changes():
            if kind == "topics" and topic in self._topics:
                await self._reload_configs(topic)

    async def _reload_configs(self, topic: str) -> None:
        self._configs[topic] = await self._read_configs(topic)
        info = self._topics.get(topic)
        if info is not None:
            info = TopicInfo(info.name, info.topic_id, info.partitions, self._configs[topic])
            self._topics[topic] = info
            self._index(info)
            self._notify(topic, info)

    async def wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        deadline = self._clock.monotonic() + timeout_s
        while not done():
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                await self._clock.wait_for(self._changed.wait(), remaining)
        return True

    # Writes

    @finishes_once_started
    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str],
                           assignments: Mapping[int, Sequence[int]] | None = None,
                           *, validate_only: bool = False) -> TopicInfo:
        error = topic_name_error(name)
        if error:
            raise InvalidTopicError(error)
        if name in self._topics or await self._zk.get(zp.topic_path(name)) is not None:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if assignments:
            plan = {p: tuple(replicas) for p, replicas in assignments.items()}
            check_assignment(plan, {b for b, _ in await self._registered_brokers()})
        else:
            if num_partitions < 1 or num_partitions > MAX_PARTITIONS:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            plan = assign_replicas(await self._registered_brokers(), num_partitions, replication_factor)
        self._validate_configs(configs)
        topic_id = new_topic_id()
        info = TopicInfo(name, topic_id, _unelected(plan), dict(configs))
        if validate_only:
            return info
        transaction = self._zk.transaction()
        transaction.create(zp.topic_config_path(name), zp.encode_topic_config(configs))
        transaction.create(zp.topic_path(name), zp.encode_topic(plan, topic_id_to_string(topic_id)))
        try:
            await self._zk.commit(transaction)
        except NodeExistsError:
            raise TopicExistsError(f"Topic '{name}' already exists.") from None
        return info

    async def _registered_brokers(self) -> list[tuple[int, str | None]]:
        """(id, rack) of every broker registered in ZooKeeper now: this broker's cache may lag behind."""
        return [(b.broker_id, b.rack) for b in (await self._zk.broker_registrations()).values()]

    async def _brokers_from_zookeeper(self) -> None:
        """Until the controller's first UpdateMetadata, the live brokers are those registered in ZooKeeper,
        so that a restarted broker's first answers name the controller and every broker. Told "no
        controller", librdkafka's admin client asks once more and may then wait out its whole timeout."""
        registered = {b.broker_id: BrokerInfo(b.broker_id, b.host, b.port, b.rack, b.endpoints)
                      for b in (await self._zk.broker_registrations(self._listener)).values()}
        if self.controller_epoch == 0:  # no UpdateMetadata arrived while ZooKeeper was read
            self._brokers = {**registered, self._me.broker_id: self._me}

    @finishes_once_started
    async def delete_topic(self, name: str) -> None:
        if not self._delete_enabled:
            raise TopicDeletionDisabledError("Topic deletion is disabled.")
        if name not in self._topics and (await self._zk.get(zp.topic_path(name)) is None or
                                         await self._zk.get(zp.delete_topic_path(name)) is not None):
            # Not in this broker's cache: not created (or not yet heard of), or already being deleted, which
            # Kafka's KafkaApis answers UNKNOWN_TOPIC_OR_PARTITION too (brokers stop serving it at once).
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        with contextlib.suppress(NodeExistsError):
            await self._zk.create(zp.delete_topic_path(name))

    @finishes_once_started
    async def create_partitions(self, name: str, total: int,
                                assignments: Sequence[Sequence[int]] | None = None,
                                *, validate_only: bool = False) -> TopicInfo:
        """Add partitions to a topic; one queued for deletion (being deleted, or held while it is reassigned) is
        refused as Kafka's KafkaApis refuses it, before asking whether it exists."""
        if await self._zk.get(zp.delete_topic_path(name)) is not None:
            raise InvalidTopicError("The topic is queued for deletion.")
        node = await self._zk.get(zp.topic_path(name))
        info = self._topics.get(name)
        if node is None or info is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        current = zp.decode_topic(node[0])
        if total > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"Number of partitions must be at most {MAX_PARTITIONS}.")
        added = plan_added_partitions(current.partitions, total, assignments, await self._registered_brokers())
        plan = {**current.partitions, **added}
        new_info = TopicInfo(name, info.topic_id, _unelected(plan), info.configs)
        if validate_only:
            return new_info
        try:
            await self._zk.set(zp.topic_path(name), zp.encode_topic(plan, current.topic_id or ""), node[1].version)
        except BadVersionError:
            raise InvalidPartitionsError(f"Topic '{name}' was changed concurrently; retry.") from None
        return new_info

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        if name not in self._topics:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        self._validate_configs(configs)
        await self._zk.set(zp.topic_config_path(name), zp.encode_topic_config(configs))
        await announce_config_change(self._zk, f"topics/{name}")
        await self._reload_configs(name)
        return self._topics[name]

    async def allocate_producer_id(self) -> ProducerId:
        if self._producer_ids is None:
            raise ProducerIdsUnavailableError("This broker was started without a way to reach the controller")
        return ProducerId(await self._producer_ids.next_id())


def _unelected(plan: Mapping[int, tuple[int, ...]]) -> dict[int, PartitionInfo]:
    """New partitions as known before the controller elects their leaders."""
    return {p: PartitionInfo(p, replicas, -1, LeaderEpoch(0), replicas) for p, replicas in plan.items()}
