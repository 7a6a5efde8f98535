"""The ZooKeeper-mode controller: elected through the ephemeral /controller znode, it owns partition
leadership and tells brokers about it with LeaderAndIsr, UpdateMetadata and StopReplica.

Election: create /controller (ephemeral) and bump /controller_epoch in one transaction, with a
version check on the epoch znode, so two contenders can never both win the same epoch. Every later
write of the controller carries a `check` of /controller_epoch at the version it wrote, so a
controller that lost its session (and its role) can no longer change anything.

Everything runs in the ZooKeeper event queue (`ZkClient.run_events`): watch events for brokers,
topics, topic deletions, ISR change notifications, the admin request znodes and /controller itself,
and the requests brokers forward (controlled shutdown, ElectLeaders, reassignments). Each handler re-reads what
its watch covers and reconciles the cluster view in `self._states`.

Metadata sent to brokers is always complete (every live broker and partition), so a broker can
replace its cache wholesale; that keeps brokers simple at the cost of larger requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError

from pybroker.common.topic import ZERO_UUID, topic_id_from_string
from pybroker.controller import zk_paths as zp
from pybroker.controller.channel import ControllerChannel
from pybroker.controller.election import (
    ElectionOutcome,
    ElectionType,
    Reassignment,
    check_replicas,
    elect_leader,
    elect_on_request,
)
from pybroker.controller.errors import InvalidReplicaAssignmentError, NoReassignmentInProgressError, UnknownTopicError
from pybroker.controller.zk_client import SESSION_LOST, ZkClient, ZkEvent
from pybroker.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

log = logging.getLogger("pybroker.controller")

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
PLAINTEXT = 0  # SecurityProtocol id
UNCLEAN_ELECTION = "unclean.leader.election.enable"

PartitionKey = tuple[str, int]
T = TypeVar("T")


class NotControllerError(Exception):
    """This broker is not (or no longer) the controller."""


class StaleBrokerEpochError(Exception):
    """The request names a broker registration that is not the current one."""


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    """Kafka's auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds and
    leader.imbalance.per.broker.percentage."""

    enabled: bool = True
    interval_s: float = 300.0
    max_imbalance_percent: int = 10


class ZkController:
    def __init__(self, zk: ZkClient, broker_id: int, *, socket_timeout_ms: int,
                 unclean_election: bool = False, rebalance: RebalanceConfig = RebalanceConfig()):
        self._zk = zk
        self._broker_id = broker_id
        self._unclean = unclean_election
        self._rebalance = rebalance
        self._rebalance_task: asyncio.Task[None] | None = None
        self._shutting_down: set[int] = set()
        self._channel = ControllerChannel(socket_timeout_ms)
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        self._brokers: dict[int, zp.BrokerRegistration] = {}
        self._assignments: dict[str, zp.TopicAssignment] = {}
        self._states: dict[PartitionKey, zp.LeaderAndIsr] = {}
        self._reassignments: dict[PartitionKey, Reassignment] = {}
        for kind, handler in (("controller-changed", self._on_controller_changed),
                              ("brokers-changed", self._on_brokers_changed),
                              ("topics-changed", self._on_topics_changed),
                              ("topic-changed", self._on_topic_changed),
                              ("delete-topics", self._on_delete_topics),
                              ("isr-changed", self._on_isr_changed),
                              ("reassign-partitions", self._on_reassign_partitions),
                              ("preferred-replica-election", self._on_preferred_replica_election),
                              (SESSION_LOST, self._on_session_lost)):
            zk.on(kind, handler)

    async def start(self) -> None:
        await self._on_controller_changed(ZkEvent("controller-changed"))

    async def stop(self) -> None:
        await self._resign()

    async def _resign(self) -> None:
        self.active = False
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        await self._channel.close()

    async def _on_session_lost(self, _: ZkEvent) -> None:
        """The session expired, and with it /controller: stop acting as controller at once (Kafka's
        processExpire); the broker re-registers and stands again once a new session is up."""
        if self.active:
            log.warning("[Controller id=%d] ZooKeeper session lost; resigning", self._broker_id)
            await self._resign()

    # Election

    async def _on_controller_changed(self, _: ZkEvent) -> None:
        current = await self._zk.get(zp.CONTROLLER, watch="controller-changed")
        if current is not None:
            if zp.decode_controller(current[0]) != self._broker_id and self.active:
                log.info("[Controller id=%d] resigning: another broker is controller now", self._broker_id)
                await self._resign()
            return
        epoch_node = await self._zk.get(zp.CONTROLLER_EPOCH)
        if epoch_node is None:
            with contextlib.suppress(NodeExistsError):
                await self._zk.create(zp.CONTROLLER_EPOCH, zp.encode_controller_epoch(0))
            epoch_node = await self._zk.get(zp.CONTROLLER_EPOCH)
            assert epoch_node is not None
        epoch, version = zp.decode_controller_epoch(epoch_node[0]), epoch_node[1].version
        transaction = self._zk.transaction()
        transaction.create(zp.CONTROLLER, zp.encode_controller(self._broker_id, int(time.time() * 1000)),
                           ephemeral=True)
        transaction.set_data(zp.CONTROLLER_EPOCH, zp.encode_controller_epoch(epoch + 1), version)
        try:
            await self._zk.commit(transaction)
        except (NodeExistsError, BadVersionError):
            await self._zk.get(zp.CONTROLLER, watch="controller-changed")
            return
        self.epoch, self._epoch_version = epoch + 1, version + 1
        self.active = True
        await self._zk.get(zp.CONTROLLER, watch="controller-changed")
        log.info("[Controller id=%d] elected controller with epoch %d", self._broker_id, self.epoch)
        await self._failover()
        if self._rebalance.enabled:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_periodically(),
                                                                          name="auto-leader-rebalance")

    async def _failover(self) -> None:
        """Load the whole cluster view, repair leadership, then tell every broker everything."""
        self._brokers = await self._read_brokers()
        for broker in self._brokers.values():
            self._channel.add_broker(broker.broker_id, broker.host, broker.port)
        self._assignments.clear()
        self._states.clear()
        self._reassignments.clear()
        for topic in await self._zk.children(zp.BROKER_TOPICS, watch="topics-changed"):
            await self._load_topic(topic)
        await self._zk.children(zp.ISR_CHANGES, watch="isr-changed")
        changed = await self._repair_partitions(self._electable())
        self._send_leader_and_isr(set(self._states) | changed, self._brokers)
        self._send_update_metadata()
        for key in sorted(self._reassignments):  # moves a previous controller started
            await self._complete_if_caught_up(key)
        await self._on_delete_topics(ZkEvent("delete-topics"))
        await self._on_reassign_partitions(ZkEvent("reassign-partitions"))
        await self._on_preferred_replica_election(ZkEvent("preferred-replica-election"))

    # Brokers

    async def _read_brokers(self) -> dict[int, zp.BrokerRegistration]:
        brokers = {}
        for child in await self._zk.children(zp.BROKER_IDS, watch="brokers-changed"):
            node = await self._zk.get(zp.broker_path(int(child)))
            if node is not None:
                brokers[int(child)] = zp.decode_broker(int(child), node[0], node[1].czxid)
        return brokers

    async def _on_brokers_changed(self, _: ZkEvent) -> None:
        if not self.active:
            await self._zk.children(zp.BROKER_IDS, watch="brokers-changed")
            return
        brokers = await self._read_brokers()
        dead = set(self._brokers) - set(brokers)
        new = set(brokers) - set(self._brokers)
        # Registered before and now, but with another broker epoch (czxid): it restarted in between and
        # may have lost an unflushed tail. Kafka's processBrokerChange (KIP-380) handles it as a failure
        # then a start-up, so it loses leadership and every replica sees a new leader epoch.
        bounced = {b for b in brokers if b in self._brokers and brokers[b].epoch != self._brokers[b].epoch}
        self._brokers = brokers
        self._shutting_down -= dead | new | bounced
        for broker_id in dead | bounced:  # requests queued for the old registration are dropped
            self._channel.remove_broker(broker_id)
        for broker_id in new | bounced:
            self._channel.add_broker(broker_id, brokers[broker_id].host, brokers[broker_id].port)
        if dead:
            log.info("[Controller id=%d] brokers %s are gone", self._broker_id, sorted(dead))
        if bounced:
            log.info("[Controller id=%d] brokers %s restarted (new broker epoch)", self._broker_id, sorted(bounced))
        if new:
            log.info("[Controller id=%d] brokers %s registered", self._broker_id, sorted(new))
        changed = await self._repair_partitions(self._electable() - bounced) if bounced else set()
        changed |= await self._repair_partitions(self._electable())
        # A (re)started broker learns every partition it hosts; others learn only what changed.
        hosted_by_new = {key for key, _ in self._replicas_on(new | bounced)}
        self._send_leader_and_isr(changed | hosted_by_new, brokers)
        self._send_update_metadata()

    def _replicas_on(self, brokers: set[int]) -> list[tuple[PartitionKey, tuple[int, ...]]]:
        return [((topic, p), replicas) for topic, assignment in self._assignments.items()
                for p, replicas in assignment.partitions.items() if brokers.intersection(replicas)]

    def _electable(self) -> set[int]:
        """Live brokers that may lead or join an ISR: registered and not shutting down."""
        return set(self._brokers) - self._shutting_down

    async def _repair_partitions(self, live: set[int]) -> set[PartitionKey]:
        """Drop dead brokers from every ISR and elect a leader wherever the current one is gone."""
        changed: set[PartitionKey] = set()
        for key in list(self._states):
            for _ in range(3):  # a leader may be changing the ISR concurrently: re-read and retry
                try:
                    if await self._repair_partition(key, live):
                        changed.add(key)
                    break
                except BadVersionError:
                    continue
        return changed

    async def _repair_partition(self, key: PartitionKey, live: set[int]) -> bool:
        state = self._states[key]
        replicas = self._assignments[key[0]].partitions[key[1]]
        isr = tuple(b for b in state.isr if b in live) or state.isr  # keep the last member: it may return
        leader: int | None = state.leader
        if leader not in live:
            leader = elect_leader(replicas, isr, live)
            if leader is None and await self._unclean_election_enabled(key[0]):
                leader = elect_leader(replicas, isr, live, unclean=True)
        if leader is not None and leader not in isr:  # unclean election
            isr = (leader,)
        leader = zp.NO_LEADER if leader is None else leader
        if leader == state.leader and isr == state.isr:
            return False
        await self._write_state(key, zp.LeaderAndIsr(leader, state.leader_epoch + 1, isr, self.epoch,
                                                     state.zk_version))
        return True

    async def _unclean_election_enabled(self, topic: str) -> bool:
        """The topic's unclean.leader.election.enable override, else the broker default; read when an
        election needs it, as Kafka's controller does, so a changed override applies at once."""
        node = await self._zk.get(zp.topic_config_path(topic))
        value = zp.decode_topic_config(node[0]).get(UNCLEAN_ELECTION) if node is not None else None
        return self._unclean if value is None else value.strip().lower() == "true"

    # Topics

    async def _load_topic(self, topic: str) -> set[PartitionKey]:
        """Read a topic's assignment (re-arming its watch) and the state of each partition; partitions
        without a state yet get their first leader. Returns the partitions that were created."""
        node = await self._zk.get(zp.topic_path(topic), watch="topic-changed")
        if node is None:
            return set()
        assignment = zp.decode_topic(node[0])
        self._assignments[topic] = assignment
        for partition in set(assignment.adding) | set(assignment.removing):
            replicas = assignment.partitions[partition]
            adding, removing = assignment.adding.get(partition, ()), assignment.removing.get(partition, ())
            self._reassignments.setdefault((topic, partition), Reassignment(
                tuple(r for r in replicas if r not in removing), tuple(r for r in replicas if r not in adding)))
        created = set()
        live = set(self._brokers)
        for partition, replicas in assignment.partitions.items():
            key = (topic, partition)
            if key in self._states:
                continue
            state_node = await self._zk.get(zp.partition_state_path(topic, partition))
            if state_node is not None:
                self._states[key] = zp.decode_partition_state(state_node[0], state_node[1].version)
                continue
            isr = tuple(b for b in replicas if b in live)
            leader = isr[0] if isr else zp.NO_LEADER
            await self._create_state(key, zp.LeaderAndIsr(leader, 0, isr or replicas, self.epoch))
            created.add(key)
        return created

    async def _on_topics_changed(self, _: ZkEvent) -> None:
        topics = await self._zk.children(zp.BROKER_TOPICS, watch="topics-changed")
        if not self.active:
            return
        created: set[PartitionKey] = set()
        new_topics = [topic for topic in topics if topic not in self._assignments]
        if new_topics:
            log.info("[Controller id=%d] new topics: %s", self._broker_id, sorted(new_topics))
        for topic in new_topics:
            created |= await self._load_topic(topic)
        for topic in set(self._assignments) - set(topics):
            self._forget_topic(topic)
        if created:
            self._send_leader_and_isr(created, self._brokers, is_new=True)
        self._send_update_metadata()

    async def _on_topic_changed(self, event: ZkEvent) -> None:
        """A topic's assignment changed: CreatePartitions added partitions."""
        topic = event.path.rsplit("/", 1)[-1]
        if not self.active or topic not in self._assignments:
            return
        created = await self._load_topic(topic)
        if created:
            self._send_leader_and_isr(created, self._brokers, is_new=True)
            self._send_update_metadata()

    async def _on_delete_topics(self, _: ZkEvent) -> None:
        pending = await self._zk.children(zp.DELETE_TOPICS, watch="delete-topics")
        if not self.active or not pending:
            return
        for topic in pending:
            if topic in self._assignments:
                self._send_stop_replica(topic)
            await self._zk.delete(zp.topic_path(topic), recursive=True)
            await self._zk.delete(zp.topic_config_path(topic))
            await self._zk.delete(zp.delete_topic_path(topic))
            self._forget_topic(topic)
            log.info("[Controller id=%d] deleted topic %s", self._broker_id, topic)
        self._send_update_metadata()

    def _forget_topic(self, topic: str) -> None:
        self._assignments.pop(topic, None)
        for key in [key for key in self._states if key[0] == topic]:
            del self._states[key]
            self._reassignments.pop(key, None)

    async def _on_isr_changed(self, _: ZkEvent) -> None:
        """Leaders changed ISRs in ZooKeeper; re-read those partitions and re-publish metadata."""
        notifications = await self._zk.children(zp.ISR_CHANGES, watch="isr-changed")
        if not self.active or not notifications:
            return
        for name in notifications:
            path = f"{zp.ISR_CHANGES}/{name}"
            node = await self._zk.get(path)
            if node is not None:
                for key in zp.decode_isr_change(node[0]):
                    state_node = await self._zk.get(zp.partition_state_path(*key))
                    if state_node is not None and key in self._states:
                        self._states[key] = zp.decode_partition_state(state_node[0], state_node[1].version)
                        await self._complete_if_caught_up(key)
            await self._zk.delete(path)
        self._send_update_metadata()

    # Controlled shutdown and preferred leaders

    async def _in_event_queue(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run a request's `work` in the event queue (where all state changes happen) and await it."""
        result: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                result.set_result(await work())
            except Exception as exc:
                result.set_exception(exc)

        self._zk.submit(run)
        return await result

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[PartitionKey]:
        """Move leadership off `broker_id` before it stops; the partitions it still leads (no other
        ISR member could take over) are returned and the broker retries later."""
        return await self._in_event_queue(lambda: self._controlled_shutdown(broker_id, broker_epoch))

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[PartitionKey]:
        if not self.active:
            raise NotControllerError(f"Broker {self._broker_id} is not the controller")
        broker = self._brokers.get(broker_id)
        if broker is None or (broker_epoch != -1 and broker_epoch < broker.epoch):
            raise StaleBrokerEpochError(f"Broker {broker_id} with epoch {broker_epoch} is not registered")
        log.info("[Controller id=%d] controlled shutdown of broker %d", self._broker_id, broker_id)
        self._shutting_down.add(broker_id)
        live = self._electable()
        changed: set[PartitionKey] = set()
        for key, state in list(self._states.items()):
            replicas = self._assignments[key[0]].partitions[key[1]]
            isr = tuple(b for b in state.isr if b != broker_id)
            if broker_id not in state.isr or not isr:
                continue
            leader = state.leader
            if leader == broker_id:
                leader = elect_leader(replicas, isr, live)
                if leader is None:
                    continue
            try:
                await self._write_state(key, zp.LeaderAndIsr(leader, state.leader_epoch + 1, isr, self.epoch,
                                                             state.zk_version))
            except BadVersionError:
                continue  # a leader changed the ISR meanwhile: the broker's retry covers this partition
            changed.add(key)
        others = {b: r for b, r in self._brokers.items() if b != broker_id}
        self._send_leader_and_isr(changed, others)
        self._send_stop_replica_without_delete(broker_id)
        self._send_update_metadata()
        return sorted(key for key, state in self._states.items() if state.leader == broker_id)

    async def _rebalance_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._rebalance.interval_s)
            self._zk.submit(self.elect_preferred_leaders)

    async def elect_preferred_leaders(self) -> None:
        """Hand leadership back to preferred replicas (the first of each assignment) on every broker
        whose share of partitions led by someone else exceeds leader.imbalance.per.broker.percentage."""
        if not self.active:
            return
        live = self._electable()
        preferred: dict[int, list[PartitionKey]] = {}
        for key, state in self._states.items():
            preferred.setdefault(self._assignments[key[0]].partitions[key[1]][0], []).append(key)
        changed: set[PartitionKey] = set()
        for broker_id, keys in preferred.items():
            elsewhere = [k for k in keys if self._states[k].leader != broker_id]
            if broker_id not in live or len(elsewhere) * 100 <= self._rebalance.max_imbalance_percent * len(keys):
                continue
            for key in elsewhere:
                state = self._states[key]
                if broker_id not in state.isr:
                    continue
                try:
                    await self._write_state(key, zp.LeaderAndIsr(broker_id, state.leader_epoch + 1, state.isr,
                                                                 self.epoch, state.zk_version))
                except BadVersionError:
                    continue
                changed.add(key)
        if changed:
            log.info("[Controller id=%d] moved %d partition(s) back to their preferred leader", self._broker_id,
                     len(changed))
            self._send_leader_and_isr(changed, self._brokers)
            self._send_update_metadata()

    # Administrator requests: ElectLeaders and partition reassignment (KIP-460, KIP-455)

    def _check_active(self) -> None:
        if not self.active:
            raise NotControllerError(f"Broker {self._broker_id} is not the controller")

    async def elect_leaders(self, election_type: ElectionType,
                            partitions: list[PartitionKey] | None) -> dict[PartitionKey, ElectionOutcome]:
        """ElectLeaders: one election per partition, every partition when `partitions` is None."""
        return await self._in_event_queue(lambda: self._elect_leaders(election_type, partitions))

    async def _elect_leaders(self, election_type: ElectionType,
                             partitions: list[PartitionKey] | None) -> dict[PartitionKey, ElectionOutcome]:
        self._check_active()
        live = self._electable()
        outcomes: dict[PartitionKey, ElectionOutcome] = {}
        changed: set[PartitionKey] = set()
        for key in sorted(self._states) if partitions is None else partitions:
            outcome = ElectionOutcome.UNKNOWN_PARTITION
            for _ in range(3):  # a leader may be changing the ISR concurrently: re-read and retry
                state = self._states.get(key)
                if state is None:
                    break
                outcome, leader = elect_on_request(election_type, self._assignments[key[0]].partitions[key[1]],
                                                   state.leader, state.isr, live)
                if leader is None:
                    break
                isr = state.isr if leader in state.isr else (leader,)
                try:
                    await self._write_state(key, zp.LeaderAndIsr(leader, state.leader_epoch + 1, isr, self.epoch,
                                                                 state.zk_version))
                except BadVersionError:
                    outcome = ElectionOutcome.NO_ELIGIBLE_LEADER
                    continue
                changed.add(key)
                break
            outcomes[key] = outcome
        if changed:
            log.info("[Controller id=%d] %s election moved the leader of %d partition(s)", self._broker_id,
                     election_type.name.lower(), len(changed))
            self._send_leader_and_isr(changed, self._brokers)
            self._send_update_metadata()
        return outcomes

    async def alter_reassignments(self, targets: dict[PartitionKey, tuple[int, ...] | None]
                                  ) -> dict[PartitionKey, Exception | None]:
        """AlterPartitionReassignments: start moving each partition to its target replicas (None cancels
        an ongoing move). The move finishes in the background once every target replica is in sync."""
        return await self._in_event_queue(lambda: self._alter_reassignments(targets))

    async def _alter_reassignments(self, targets: dict[PartitionKey, tuple[int, ...] | None]
                                   ) -> dict[PartitionKey, Exception | None]:
        self._check_active()
        results: dict[PartitionKey, Exception | None] = {}
        started: set[PartitionKey] = set()
        cancelled: dict[PartitionKey, Reassignment] = {}
        for key, target in targets.items():
            try:
                ongoing = self._plan_reassignment(key, target)
            except (UnknownTopicError, InvalidReplicaAssignmentError, NoReassignmentInProgressError) as exc:
                results[key] = exc
                continue
            results[key] = None
            if target is None and ongoing is not None:
                cancelled[key] = ongoing
            elif key in self._reassignments:
                started.add(key)
        for topic in sorted({key[0] for key in started}):
            await self._write_assignment(topic)
        for key in sorted(started):
            log.info("[Controller id=%d] reassigning %s-%d to %s", self._broker_id, *key,
                     list(self._reassignments[key].target))
            await self._bump_leader_epoch(key)
        if started:
            self._send_leader_and_isr(started, self._brokers)
        for key, ongoing in sorted(cancelled.items()):
            await self._finish_reassignment(key, ongoing.original, ongoing.adding)
        for key in sorted(started):
            await self._complete_if_caught_up(key)
        self._send_update_metadata()
        return results

    async def _on_reassign_partitions(self, _: ZkEvent) -> None:
        """/admin/reassign_partitions, as tools using ZooKeeper directly write it: start those moves
        and delete the znode (Kafka 2.4+ keeps ongoing moves in /brokers/topics/T instead)."""
        node = await self._zk.get(zp.REASSIGN_PARTITIONS, watch="reassign-partitions")
        if not self.active or node is None:
            return
        try:
            targets: dict[PartitionKey, tuple[int, ...] | None] = dict(zp.decode_reassignment(node[0]))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("[Controller id=%d] ignoring malformed %s: %s", self._broker_id, zp.REASSIGN_PARTITIONS, exc)
            targets = {}
        for key, error in (await self._alter_reassignments(targets)).items():
            if error is not None:
                log.warning("[Controller id=%d] reassignment of %s-%d refused: %s", self._broker_id, *key, error)
        await self._zk.delete(zp.REASSIGN_PARTITIONS)

    async def _on_preferred_replica_election(self, _: ZkEvent) -> None:
        """/admin/preferred_replica_election, as tools using ZooKeeper directly write it."""
        node = await self._zk.get(zp.PREFERRED_REPLICA_ELECTION, watch="preferred-replica-election")
        if not self.active or node is None:
            return
        try:
            partitions = zp.decode_preferred_election(node[0])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("[Controller id=%d] ignoring malformed %s: %s", self._broker_id,
                        zp.PREFERRED_REPLICA_ELECTION, exc)
            partitions = []
        await self._elect_leaders(ElectionType.PREFERRED, partitions)
        await self._zk.delete(zp.PREFERRED_REPLICA_ELECTION)

    def _plan_reassignment(self, key: PartitionKey, target: tuple[int, ...] | None) -> Reassignment | None:
        """Record the move of `key` in memory (the caller writes it to ZooKeeper); returns the ongoing
        move that `target` replaces, if any."""
        if key not in self._states:
            raise UnknownTopicError(f"Topic partition {key[0]}-{key[1]} does not exist.")
        ongoing = self._reassignments.get(key)
        if target is None:
            if ongoing is None:
                raise NoReassignmentInProgressError(f"No reassignment in progress for {key[0]}-{key[1]}.")
            return ongoing
        if not target:
            raise InvalidReplicaAssignmentError("The target replica list must not be empty.")
        check_replicas(target, set(self._brokers))
        original = ongoing.original if ongoing else self._assignments[key[0]].partitions[key[1]]
        if target != original:
            self._reassignments[key] = Reassignment(target, original)
            self._set_replicas(key, self._reassignments[key].replicas)
        return ongoing

    def _set_replicas(self, key: PartitionKey, replicas: tuple[int, ...]) -> None:
        assignment = self._assignments[key[0]]
        self._assignments[key[0]] = zp.TopicAssignment({**assignment.partitions, key[1]: replicas},
                                                       assignment.topic_id)

    async def _write_assignment(self, topic: str) -> None:
        """/brokers/topics/T with the ongoing moves' adding and removing replicas, as Kafka keeps them."""
        ongoing = {key[1]: move for key, move in self._reassignments.items() if key[0] == topic}
        assignment = self._assignments[topic]
        transaction = self._zk.transaction()
        transaction.check(zp.CONTROLLER_EPOCH, self._epoch_version)
        transaction.set_data(zp.topic_path(topic), zp.encode_topic(
            assignment.partitions, assignment.topic_id or "",
            adding={p: m.adding for p, m in ongoing.items() if m.adding},
            removing={p: m.removing for p, m in ongoing.items() if m.removing}))
        try:
            await self._zk.commit(transaction)
        except BadVersionError:  # only the epoch check can fail: another controller was elected
            await self._resign_if_fenced()
            raise

    async def _bump_leader_epoch(self, key: PartitionKey) -> None:
        """A new leader epoch with the same leader, so brokers apply the changed replica set."""
        for _ in range(3):
            state = self._states[key]
            try:
                await self._write_state(key, zp.LeaderAndIsr(state.leader, state.leader_epoch + 1, state.isr,
                                                             self.epoch, state.zk_version))
                return
            except BadVersionError:
                continue

    async def _complete_if_caught_up(self, key: PartitionKey) -> None:
        move = self._reassignments.get(key)
        state = self._states.get(key)
        if move is not None and state is not None and move.caught_up(state.isr):
            await self._finish_reassignment(key, move.target, move.removing)

    async def _finish_reassignment(self, key: PartitionKey, replicas: tuple[int, ...], dropped: tuple[int, ...]
                                   ) -> None:
        """Settle `key` on `replicas`: a leader among them, an ISR of them only, the dropped replicas
        stopped and deleted, and /brokers/topics/T without the move."""
        live = self._electable()
        for _ in range(3):
            state = self._states[key]
            isr = tuple(b for b in state.isr if b in replicas) or replicas
            leader = state.leader if state.leader in replicas and state.leader in live else \
                elect_leader(replicas, isr, live)
            try:
                await self._write_state(key, zp.LeaderAndIsr(zp.NO_LEADER if leader is None else leader,
                                                             state.leader_epoch + 1, isr, self.epoch,
                                                             state.zk_version))
                break
            except BadVersionError:
                continue
        del self._reassignments[key]
        self._set_replicas(key, replicas)
        await self._write_assignment(key[0])
        log.info("[Controller id=%d] reassignment of %s-%d finished on %s", self._broker_id, *key, list(replicas))
        self._send_leader_and_isr({key}, self._brokers)
        state = self._states[key]
        self._send_stop_replicas({broker_id: {key[0]: [StopReplicaRequest.StopReplicaPartitionState(
            partition_index=key[1], leader_epoch=state.leader_epoch, delete_partition=True)]} for broker_id in dropped})
        self._send_update_metadata()

    def list_reassignments(self, partitions: list[PartitionKey] | None) -> dict[PartitionKey, Reassignment]:
        """ListPartitionReassignments: the ongoing moves, of `partitions` only when given."""
        self._check_active()
        return {key: move for key, move in sorted(self._reassignments.items())
                if partitions is None or key in partitions}

    # Fenced writes

    async def _resign_if_fenced(self) -> None:
        """After a failed conditional write: when /controller_epoch moved, another controller was elected
        and this one must stop (Kafka's ControllerMovedException), never retry as if a leader had raced."""
        node = await self._zk.get(zp.CONTROLLER_EPOCH)
        if node is not None and node[1].version == self._epoch_version:
            return
        log.warning("[Controller id=%d] controller epoch %d was fenced by a newer controller; resigning",
                    self._broker_id, self.epoch)
        await self._resign()
        await self._zk.get(zp.CONTROLLER, watch="controller-changed")
        raise NotControllerError(f"Broker {self._broker_id} is no longer the controller")

    async def _create_state(self, key: PartitionKey, state: zp.LeaderAndIsr) -> None:
        transaction = self._zk.transaction()
        transaction.check(zp.CONTROLLER_EPOCH, self._epoch_version)
        transaction.create(zp.partition_path(*key))
        transaction.create(zp.partition_state_path(*key), zp.encode_partition_state(state))
        try:
            await self._zk.ensure_paths(zp.partitions_path(key[0]))
            await self._zk.commit(transaction)
        except BadVersionError:
            await self._resign_if_fenced()
            raise
        except NodeExistsError:  # another writer got there first: adopt what it wrote
            node = await self._zk.get(zp.partition_state_path(*key))
            if node is not None:
                self._states[key] = zp.decode_partition_state(node[0], node[1].version)
            return
        self._states[key] = zp.LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, 0)

    async def _write_state(self, key: PartitionKey, state: zp.LeaderAndIsr) -> None:
        """Conditional on both the controller epoch and the state's version (a leader may have
        changed the ISR meanwhile: then re-read and let the caller's next pass decide)."""
        transaction = self._zk.transaction()
        transaction.check(zp.CONTROLLER_EPOCH, self._epoch_version)
        transaction.set_data(zp.partition_state_path(*key), zp.encode_partition_state(state), state.zk_version)
        try:
            await self._zk.commit(transaction)
        except BadVersionError:
            await self._resign_if_fenced()
            node = await self._zk.get(zp.partition_state_path(*key))
            if node is not None:
                self._states[key] = zp.decode_partition_state(node[0], node[1].version)
            raise
        self._states[key] = zp.LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch,
                                            state.zk_version + 1)

    # Requests to brokers

    def _send_leader_and_isr(self, keys: set[PartitionKey], brokers: dict[int, zp.BrokerRegistration], *,
                             is_new: bool = False) -> None:
        per_broker: dict[int, dict[str, list[LeaderAndIsrRequest.LeaderAndIsrPartitionState]]] = {}
        for key in sorted(keys):
            state = self._states.get(key)
            if state is None:
                continue
            replicas = self._assignments[key[0]].partitions[key[1]]
            move = self._reassignments.get(key)
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
                controller_id=self._broker_id, controller_epoch=self.epoch, broker_epoch=brokers[broker_id].epoch,
                type=0, live_leaders=live_leaders,
                topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name=topic, topic_id=self._topic_id(topic), partition_states=states)
                    for topic, states in topics.items()])
            self._channel.send(broker_id, request, LEADER_AND_ISR_VERSION, LeaderAndIsrResponse)

    def _send_update_metadata(self) -> None:
        live = set(self._brokers)
        brokers = [UpdateMetadataRequest.UpdateMetadataBroker(
            id=b.broker_id, rack=b.rack, endpoints=[UpdateMetadataRequest.UpdateMetadataEndpoint(
                port=b.port, host=b.host, listener="PLAINTEXT", security_protocol=PLAINTEXT)])
            for b in sorted(self._brokers.values(), key=lambda b: b.broker_id)]
        topics = []
        for topic, assignment in sorted(self._assignments.items()):
            partitions = []
            for p, replicas in sorted(assignment.partitions.items()):
                state = self._states.get((topic, p))
                if state is None:
                    continue
                partitions.append(UpdateMetadataRequest.UpdateMetadataPartitionState(
                    partition_index=p, controller_epoch=state.controller_epoch, leader=state.leader,
                    leader_epoch=state.leader_epoch, isr=list(state.isr), zk_version=state.zk_version,
                    replicas=list(replicas), offline_replicas=[r for r in replicas if r not in live]))
            topics.append(UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=topic, topic_id=self._topic_id(topic), partition_states=partitions))
        for broker in self._brokers.values():
            request = UpdateMetadataRequest(controller_id=self._broker_id, controller_epoch=self.epoch,
                                            broker_epoch=broker.epoch, live_brokers=brokers, topic_states=topics)
            self._channel.send(broker.broker_id, request, UPDATE_METADATA_VERSION, UpdateMetadataResponse)

    def _send_stop_replica(self, topic: str) -> None:
        per_broker: dict[int, dict[str, list[StopReplicaRequest.StopReplicaPartitionState]]] = {}
        for p, replicas in self._assignments[topic].partitions.items():
            state = self._states.get((topic, p))
            for broker_id in replicas:
                per_broker.setdefault(broker_id, {}).setdefault(topic, []).append(
                    StopReplicaRequest.StopReplicaPartitionState(
                        partition_index=p, leader_epoch=-2 if state is None else state.leader_epoch,
                        delete_partition=True))
        self._send_stop_replicas(per_broker)

    def _send_stop_replica_without_delete(self, broker_id: int) -> None:
        """Stop `broker_id`'s replicas that it does not lead (it is shutting down: no more fetching)."""
        topics: dict[str, list[StopReplicaRequest.StopReplicaPartitionState]] = {}
        for (topic, p), state in sorted(self._states.items()):
            if broker_id in self._assignments[topic].partitions[p] and state.leader != broker_id:
                topics.setdefault(topic, []).append(StopReplicaRequest.StopReplicaPartitionState(
                    partition_index=p, leader_epoch=state.leader_epoch, delete_partition=False))
        if topics:
            self._send_stop_replicas({broker_id: topics})

    def _send_stop_replicas(self, per_broker: dict[int, dict[str, list[StopReplicaRequest.StopReplicaPartitionState]]]
                            ) -> None:
        for broker_id, topics in per_broker.items():
            if broker_id in self._brokers:
                request = StopReplicaRequest(
                    controller_id=self._broker_id, controller_epoch=self.epoch,
                    broker_epoch=self._brokers[broker_id].epoch,
                    topic_states=[StopReplicaRequest.StopReplicaTopicState(topic_name=t, partition_states=p)
                                  for t, p in topics.items()])
                self._channel.send(broker_id, request, STOP_REPLICA_VERSION, StopReplicaResponse)

    def _topic_id(self, topic: str) -> uuid.UUID:
        topic_id = self._assignments[topic].topic_id
        return topic_id_from_string(topic_id) if topic_id else ZERO_UUID
