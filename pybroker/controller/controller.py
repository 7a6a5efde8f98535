"""The ZooKeeper-mode controller (Kafka's KafkaController): elected through the ephemeral /controller
znode, it owns partition leadership and tells brokers about it with LeaderAndIsr, UpdateMetadata and
StopReplica. This module wires the parts and holds the event handlers:

- events.py: the one event queue every watch, session change and request goes through;
- context.py: the cluster view, rebuilt on failover, changed only by these handlers;
- zk_writer.py: the one writer, every write fenced by a check of /controller_epoch;
- election.py (pure) and partition_state.py / replica_state.py: the transitions;
- requests.py / channel.py: requests to brokers, one ordered sender each;
- reassignment.py: partition moves;
- topic_deletion.py: deletions, pending until every replica is deleted.

Each handler re-reads what its watch covers and reconciles the context.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass, replace

from pybroker.client.sasl import SaslCredentials
from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.common.topic import TopicPartition
from pybroker.controller.alter_partition import IsrProposal, check_proposal
from pybroker.zk import events as ev
from pybroker.zk import paths as zp
from pybroker.controller.channel import ControllerChannel
from pybroker.controller.context import ControllerContext
from pybroker.controller.election import (
    ElectionOutcome,
    ElectionType,
    Reassignment,
    controlled_shutdown_election,
    preferred_election,
)
from pybroker.controller.errors import BrokerIdNotRegisteredError, NotControllerError, StaleBrokerEpochError
from pybroker.controller.log_dir_failure import LOG_DIR_EVENT, LogDirFailures
from pybroker.controller.producer_ids import reserve_block
from pybroker.controller.log_ends import ask_log_ends
from pybroker.controller.partition_state import LogEndQuery, PartitionState, PartitionStateMachine, partition_state
from pybroker.controller.reassignment import Reassignments, Targets
from pybroker.controller.replica_state import offline_followers
from pybroker.controller.requests import BrokerRequests
from pybroker.controller.topic_deletion import Sent, TopicDeletions
from pybroker.zk.client import ZkClient, ZkEvent
from pybroker.controller.zk_writer import FencedZkWriter, StateConflict
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import StopReplicaResponse
from pybroker.protocol.schema import Message

__all__ = ["NotControllerError", "RebalanceConfig", "StaleBrokerEpochError", "ZkController"]

log = logging.getLogger("pybroker.controller")

LOG_END_RETRY_S = 2.0  # how soon a partition whose ISR members did not all tell their log ends is asked again


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    """Kafka's auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds and
    leader.imbalance.per.broker.percentage."""

    enabled: bool = True
    interval_s: float = 300.0
    max_imbalance_percent: int = 10


class ZkController:
    def __init__(self, zk: ZkClient, broker_id: int, *, socket_timeout_ms: int,
                 unclean_election: bool = False, rebalance: RebalanceConfig = RebalanceConfig(),
                 inter_broker_listener: str = "PLAINTEXT", tls: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None, log_ends: LogEndQuery | None = None,
                 delete_topic_enable: bool = True, clock: Clock = SYSTEM_CLOCK):
        """``log_ends`` answers for the brokers' logs before a longest-log election; by default the
        brokers are asked (tests whose brokers are bare registrations give it). With ``delete_topic_enable``
        false (delete.topic.enable) entries in /admin/delete_topics are removed without deleting. ``clock``: the
        broker's, which the rebalance interval, the log-end retries and the requests' retry backoff wait on."""
        self._zk = zk
        self._clock = clock
        self._broker_id = broker_id
        self._rebalance = rebalance
        self._delete_enabled = delete_topic_enable
        self._rebalance_task: asyncio.Task[None] | None = None
        self._log_end_task: asyncio.Task[None] | None = None
        self._elected_generation = 0  # the ZooKeeper session generation this broker was last elected in
        self._listener = inter_broker_listener  # brokers are reached on its endpoints
        self._channel = ControllerChannel(socket_timeout_ms, tls, sasl, clock)
        self._ctx = ControllerContext()
        self._writer = FencedZkWriter(zk, broker_id, self._on_fenced, clock)
        asked: LogEndQuery = log_ends or (lambda wanted: ask_log_ends(self._channel, wanted))
        self._partitions = PartitionStateMachine(self._ctx, zk, self._writer, unclean_default=unclean_election,
                                                 log_ends=asked)
        self._requests = BrokerRequests(self._ctx, self._channel, broker_id)
        self._deletions = TopicDeletions(self._ctx)
        self._reassignments = Reassignments(self._ctx, self._writer, self._partitions, self._requests, broker_id,
                                            self._deletions.is_queued)
        self._log_dir_failures = LogDirFailures(self._ctx, zk, self._requests, self._partitions, lambda: self.epoch,
                                                self._publish)
        self._channel.response_listeners.append(self._on_broker_response)
        for kind, handler in ((ev.CONTROLLER_CHANGED, self._on_controller_changed),
                              (ev.BROKERS_CHANGED, self._on_brokers_changed),
                              (ev.TOPICS_CHANGED, self._on_topics_changed),
                              (ev.TOPIC_CHANGED, self._on_topic_changed),
                              (ev.DELETE_TOPICS, self._on_delete_topics),
                              (ev.REASSIGN_PARTITIONS, self._on_reassign_partitions),
                              (ev.PREFERRED_REPLICA_ELECTION, self._on_preferred_replica_election),
                              (ev.SESSION_LOST, self._on_session_lost),
                              (LOG_DIR_EVENT, self._log_dir_failures.on_event)):
            zk.on(kind, handler)

    @property
    def active(self) -> bool:
        return self._writer.active

    @property
    def epoch(self) -> int:
        return self._writer.epoch

    async def start(self) -> None:
        await self._on_controller_changed(ZkEvent(ev.CONTROLLER_CHANGED))

    async def stop(self) -> None:
        await self._resign()

    async def _resign(self) -> None:
        self._writer.resign()
        for task in (self._rebalance_task, self._log_end_task):
            if task is not None:
                task.cancel()
        self._rebalance_task = self._log_end_task = None
        await self._channel.close()

    async def _on_fenced(self) -> None:
        """A write failed its epoch check: another controller was elected."""
        await self._resign()
        await self._zk.get(zp.CONTROLLER, watch=ev.CONTROLLER_CHANGED)

    async def _on_session_lost(self, _: ZkEvent) -> None:
        """The session expired, and with it /controller: stop acting as controller at once (Kafka's
        processExpire); the broker re-registers and stands again once a new session is up. A loss
        handled only after this broker was elected again in the next session is not this
        controllership's (chaos round 7014: resigning then left /controller held by a broker that no
        longer acted as controller, and every ISR change was refused NOT_CONTROLLER for good)."""
        if self.active and self._elected_generation < self._zk.session_generation:
            log.warning("[Controller id=%d] ZooKeeper session lost; resigning", self._broker_id)
            await self._resign()

    def _check_active(self) -> None:
        if not self.active:
            raise NotControllerError(f"Broker {self._broker_id} is not the controller")

    def _send_changes(self, keys: set[TopicPartition], brokers: dict[int, zp.BrokerRegistration] | None = None, *,
                      is_new: bool = False) -> None:
        self._requests.leader_and_isr(keys, self._ctx.brokers if brokers is None else brokers, self.epoch,
                                      is_new=is_new)

    def _publish(self, keys: set[TopicPartition]) -> None:
        self._send_changes(keys)
        self._send_metadata(keys)

    def _send_metadata(self, partitions: set[TopicPartition] | None = None, *, to: set[int] | None = None,
                       deleted: dict[str, list[int]] | None = None) -> None:
        """UpdateMetadata with the states of `partitions` (all when None) to the brokers in `to` (all)."""
        self._requests.update_metadata(self.epoch, partitions, to=to, deleted=deleted)

    # Election and failover

    async def _on_controller_changed(self, _: ZkEvent) -> None:
        current = await self._zk.get(zp.CONTROLLER, watch=ev.CONTROLLER_CHANGED)
        if current is not None:
            if zp.decode_controller(current[0]) != self._broker_id and self.active:
                log.info("[Controller id=%d] resigning: another broker is controller now", self._broker_id)
                await self._resign()
            return
        generation = self._zk.session_generation
        elected = await self._writer.elect()
        await self._zk.get(zp.CONTROLLER, watch=ev.CONTROLLER_CHANGED)
        if not elected:
            return
        self._elected_generation = generation
        log.info("[Controller id=%d] elected controller with epoch %d", self._broker_id, self.epoch)
        await self._failover()
        if self._rebalance.enabled:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_periodically(),
                                                                          name="auto-leader-rebalance")
        self._log_end_task = asyncio.get_running_loop().create_task(self._ask_log_ends_periodically(),
                                                                    name="longest-log-elections")

    async def _failover(self) -> None:
        """Load the whole cluster view, repair leadership, then tell every broker everything."""
        ctx = self._ctx
        ctx.brokers = await self._read_brokers()
        for broker in ctx.brokers.values():
            self._channel.add_broker(broker.broker_id, broker.host, broker.port)
        ctx.clear_topics()
        ctx.offline_replicas.clear()
        await self._log_dir_failures.start()
        written: dict[TopicPartition, int] = {}
        for topic in await self._zk.children(zp.BROKER_TOPICS, watch=ev.TOPICS_CHANGED):
            await self._load_topic(topic, written)
        # Topics queued for deletion leave the context before any election (Kafka's new controller reads
        # /admin/delete_topics in initializeControllerContext), unless being reassigned; their deletion starts
        # over below. With deletion disabled the entries are dropped below.
        self._deletions.clear()
        for topic in await self._zk.children(zp.DELETE_TOPICS, watch=ev.DELETE_TOPICS):
            if topic in ctx.assignments and self._delete_enabled:
                self._deletions.enqueue(topic)
        # Brokers that restarted since a partition's state was written are bounced for it, as
        # processBrokerChange would have handled them had this controller seen the old registration.
        restarted = self._partitions.restarted_since_written(written)
        if restarted:
            log.info("[Controller id=%d] %d partition(s) have a leader or ISR member registered after their "
                     "state was written (restarted): %s", self._broker_id, len(restarted),
                     sorted(set().union(*restarted.values())))
        changed = await self._partitions.elect_restarted(restarted, ctx.electable())
        changed |= await self._partitions.elect_offline(ctx.electable())
        self._send_changes(set(ctx.states) | changed)
        self._send_metadata(deleted=self._deletions.marked())
        for key in sorted(ctx.reassignments):  # moves a previous controller started
            await self._reassignments.complete_if_caught_up(key)
        await self._release_reassigned_deletions()
        await self._on_delete_topics(ZkEvent(ev.DELETE_TOPICS))
        await self._on_reassign_partitions(ZkEvent(ev.REASSIGN_PARTITIONS))
        await self._on_preferred_replica_election(ZkEvent(ev.PREFERRED_REPLICA_ELECTION))

    def _on_broker_response(self, broker_id: int, response: Message) -> None:
        """A LeaderAndIsr answer naming replicas in a failed log dir: handle it in the event queue."""
        offline = self._log_dir_failures.on_response(broker_id, response)
        if offline and self.active:
            self._zk.events.submit(lambda: self._log_dir_failures.mark_offline(broker_id, offline))

    # Brokers

    async def _read_brokers(self) -> dict[int, zp.BrokerRegistration]:
        return await self._zk.broker_registrations(self._listener, watch=ev.BROKERS_CHANGED)

    async def _on_brokers_changed(self, _: ZkEvent) -> None:
        if not self.active:
            await self._zk.children(zp.BROKER_IDS, watch=ev.BROKERS_CHANGED)
            return
        ctx = self._ctx
        brokers = await self._read_brokers()
        dead = set(ctx.brokers) - set(brokers)
        new = set(brokers) - set(ctx.brokers)
        # Registered before and now, but by another process (process epoch): it restarted in between and
        # may have lost an unflushed tail. Kafka's processBrokerChange (KIP-380) handles it as a failure
        # then a start-up, so it loses leadership and every replica sees a new leader epoch. The same
        # process registering again after its session expired kept its log: it keeps its place, and
        # only learns everything again under its new broker epoch.
        changed_epoch = {b for b in brokers if b in ctx.brokers and brokers[b].epoch != ctx.brokers[b].epoch}
        bounced = {b for b in changed_epoch if brokers[b].process_epoch != ctx.brokers[b].process_epoch}
        reregistered = changed_epoch - bounced
        ctx.brokers = brokers
        ctx.shutting_down -= dead | new | changed_epoch
        for broker_id in dead | changed_epoch:  # requests queued for the old registration are dropped
            self._channel.remove_broker(broker_id)
        for broker_id in new | changed_epoch:
            self._channel.add_broker(broker_id, brokers[broker_id].host, brokers[broker_id].port)
        if dead:
            log.info("[Controller id=%d] brokers %s are gone", self._broker_id, sorted(dead))
        if bounced:
            log.info("[Controller id=%d] brokers %s restarted (new broker epoch)", self._broker_id, sorted(bounced))
        if reregistered:
            log.info("[Controller id=%d] brokers %s registered again after a lost session", self._broker_id,
                     sorted(reregistered))
        if new:
            log.info("[Controller id=%d] brokers %s registered", self._broker_id, sorted(new))
        halted = self._deletions.brokers_failed(dead | changed_epoch)
        if halted:
            log.info("[Controller id=%d] halted deletion of topics %s: a replica's broker went away or "
                     "registered again before answering",
                     self._broker_id, sorted(halted))
        changed = await self._partitions.elect_offline(ctx.electable() - bounced, bounced) if bounced else set()
        changed |= await self._partitions.elect_offline(ctx.electable())
        offline = sum(partition_state(ctx, key) == PartitionState.OFFLINE for key in ctx.states)
        if offline:
            log.warning("[Controller id=%d] %d partition(s) offline: no live leader", self._broker_id, offline)
        # A (re)started broker learns every partition it hosts and the whole metadata; others learn what
        # changed: new leaders, and the offline replicas of partitions on brokers that went or came.
        started = new | changed_epoch
        self._send_changes(changed | ctx.partitions_on(started), brokers)
        if started:
            self._send_metadata(to=started, deleted=self._deletions.marked())
        self._send_metadata(changed | ctx.partitions_on(dead | started), to=set(brokers) - started)
        if self._deletions.brokers_started(started):  # Kafka's onBrokerStartup: resumeDeletionForTopics
            await self._resume_deletions()

    # Topics

    async def _load_topic(self, topic: str, written: dict[TopicPartition, int] | None = None) -> set[TopicPartition]:
        """Read a topic's assignment (re-arming its watch), its ongoing moves and the state of each
        partition (with the zxid of its last write into `written`); returns the partitions created."""
        node = await self._zk.get(zp.topic_path(topic), watch=ev.TOPIC_CHANGED)
        if node is None:
            return set()
        assignment = zp.decode_topic(node[0])
        self._ctx.assignments[topic] = assignment
        self._reassignments.load(topic, assignment)
        return await self._partitions.load(topic, written)

    async def _on_topics_changed(self, _: ZkEvent) -> None:
        topics = await self._zk.children(zp.BROKER_TOPICS, watch=ev.TOPICS_CHANGED)
        if not self.active:
            return
        created: set[TopicPartition] = set()
        new_topics = [topic for topic in topics
                      if topic not in self._ctx.assignments and not self._deletions.is_queued(topic)]
        if new_topics:
            log.info("[Controller id=%d] new topics: %s", self._broker_id, sorted(new_topics))
        for topic in new_topics:
            created |= await self._load_topic(topic)
        deleted = {topic: sorted(self._ctx.assignments[topic].partitions)
                   for topic in set(self._ctx.assignments) - set(topics)}
        for topic in deleted:
            self._ctx.forget_topic(topic)
        if created:
            self._send_changes(created, is_new=True)
        loaded = {TopicPartition(topic, p) for topic in new_topics if topic in self._ctx.assignments
                  for p in self._ctx.assignments[topic].partitions}
        self._send_metadata(loaded, deleted=deleted)

    async def _on_topic_changed(self, event: ZkEvent) -> None:
        """A topic's assignment changed: CreatePartitions added partitions. A watch fired by a session
        event names no path: the session's loss already made this controller resign."""
        if not event.path:
            return
        topic = event.path.rsplit("/", 1)[-1]
        if not self.active or topic not in self._ctx.assignments:
            return
        created = await self._load_topic(topic)
        if created:
            self._send_changes(created, is_new=True)
            self._send_metadata(created)

    async def _on_delete_topics(self, _: ZkEvent) -> None:
        """Queue the topics named in /admin/delete_topics: brokers stop serving them at once (a topic being
        reassigned: once its moves end), their replicas are deleted, and their znodes go once every replica
        is (topic_deletion.py). With delete.topic.enable=false the entries are removed and nothing is deleted,
        as Kafka's processTopicDeletion does for entries written straight into ZooKeeper."""
        pending = await self._zk.children(zp.DELETE_TOPICS, watch=ev.DELETE_TOPICS)
        if not self.active:
            return
        queued: set[str] = set()
        held: set[str] = set()
        for topic in pending:
            if self._deletions.is_queued(topic):
                continue
            if topic not in self._ctx.assignments:  # no such topic: the request is dropped, as Kafka does
                await self._writer.delete(zp.delete_topic_path(topic))
            elif not self._delete_enabled:
                log.info("[Controller id=%d] removing %s since delete topic is disabled", self._broker_id, topic)
                await self._writer.delete(zp.delete_topic_path(topic))
            elif self._deletions.enqueue(topic):
                queued.add(topic)
            else:
                held.add(topic)
        if held:
            log.info("[Controller id=%d] halted deletion of topics %s: topic reassignment in progress",
                     self._broker_id, sorted(held))
        if queued:
            log.info("[Controller id=%d] deleting topics %s", self._broker_id, sorted(queued))
            self._send_metadata(set(), deleted=self._deletions.marked(queued))
        await self._resume_deletions()

    async def _release_reassigned_deletions(self) -> None:
        """Start deleting the topics held for a reassignment that has ended (Kafka: onPartitionReassignment's
        resumeDeletionForTopics)."""
        released = self._deletions.release_reassigned()
        if released:
            log.info("[Controller id=%d] reassignment of topics %s ended: deleting them", self._broker_id,
                     sorted(released))
            self._send_metadata(set(), deleted=self._deletions.marked(released))
            await self._resume_deletions()

    async def _resume_deletions(self) -> None:
        """Kafka's resumeDeletions: remove the topics whose every replica is deleted, and send
        StopReplica(delete=true) to the replicas of the topics eligible for deletion."""
        requests, sent, done, halted = self._deletions.next_steps()
        for topic in done:
            await self._writer.delete(zp.topic_path(topic), zp.topic_config_path(topic), zp.delete_topic_path(topic))
            log.info("[Controller id=%d] deleted topic %s", self._broker_id, topic)
        if halted:
            log.info("[Controller id=%d] halted deletion of topics %s until their replicas' brokers are back",
                     self._broker_id, sorted(halted))
        self._requests.stop_replicas(requests, self.epoch, lambda broker_id, response: self._zk.events.submit(
            lambda: self._on_deletion_answer(broker_id, sent, response)))

    async def _on_deletion_answer(self, broker_id: int, sent: Sent, response: StopReplicaResponse | None) -> None:
        if not self.active:
            return
        self._deletions.answered(broker_id, sent, response)
        await self._resume_deletions()

    # Controlled shutdown and preferred leaders

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Move leadership off `broker_id` before it stops; the partitions it still leads (no other
        ISR member could take over) are returned and the broker retries later."""
        return await self._zk.events.call(lambda: self._controlled_shutdown(broker_id, broker_epoch))

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        self._check_active()
        ctx = self._ctx
        broker = ctx.brokers.get(broker_id)
        if broker is None or (broker_epoch != -1 and broker_epoch < broker.epoch):
            raise StaleBrokerEpochError(f"Broker {broker_id} with epoch {broker_epoch} is not registered")
        log.info("[Controller id=%d] controlled shutdown of broker %d", self._broker_id, broker_id)
        ctx.shutting_down.add(broker_id)
        live = ctx.electable()
        changed: set[TopicPartition] = set()
        for key in list(ctx.states):
            # One attempt: after a conflict (a leader changed the ISR) the broker's retry covers it.
            if await self._partitions.transition(key, lambda state: controlled_shutdown_election(
                    state, ctx.replicas(key), broker_id, live, self.epoch), attempts=1):
                changed.add(key)
        self._send_changes(changed, {b: r for b, r in ctx.brokers.items() if b != broker_id})
        self._requests.stop_replicas(offline_followers(ctx, broker_id), self.epoch)
        self._send_metadata(changed)
        return sorted(key for key, state in ctx.states.items() if state.leader == broker_id)

    async def alter_partition(self, broker_id: int, broker_epoch: int, proposals: list[IsrProposal]
                              ) -> list[ErrorCode | zp.LeaderAndIsr]:
        """AlterPartition (KIP-497): per proposal, its error or the partition's state now stored."""
        return await self._zk.events.call(lambda: self._alter_partition(broker_id, broker_epoch, proposals))

    async def _alter_partition(self, broker_id: int, broker_epoch: int, proposals: list[IsrProposal]
                               ) -> list[ErrorCode | zp.LeaderAndIsr]:
        self._check_active()
        broker = self._ctx.brokers.get(broker_id)
        if broker is None or broker_epoch != broker.epoch:
            raise StaleBrokerEpochError(f"Broker {broker_id} epoch {broker_epoch} is not its registration")
        results: list[ErrorCode | zp.LeaderAndIsr] = []
        changed: set[TopicPartition] = set()
        for proposal in proposals:
            outcome = check_proposal(self._ctx, broker_id, proposal)
            if isinstance(outcome, zp.LeaderAndIsr) and outcome.isr != self._ctx.states[proposal.key].isr:
                try:
                    await self._partitions.write(proposal.key, replace(outcome, controller_epoch=self.epoch))
                except StateConflict:
                    outcome = self._applied(broker_id, proposal)
                else:
                    outcome = self._ctx.states[proposal.key]
                    changed.add(proposal.key)
                    log.info("[Controller id=%d] ISR of %s-%d is now %s (AlterPartition from broker %d)",
                             self._broker_id, *proposal.key, list(outcome.isr), broker_id)
                    await self._reassignments.complete_if_caught_up(proposal.key)
            results.append(outcome)
        if changed:
            self._send_metadata(changed)
            await self._release_reassigned_deletions()
        return results

    def _applied(self, broker_id: int, proposal: IsrProposal) -> ErrorCode | zp.LeaderAndIsr:
        """After a version conflict (the context now has the stored state): the stored state when it is the proposal
        applied already, else INVALID_UPDATE_VERSION. An earlier write of this proposal may have landed though
        ZooKeeper answered it with a lost connection, leaving the context behind; Kafka's conditional ZooKeeper
        update checks the stored data the same way before it calls a conflict one."""
        stored = check_proposal(self._ctx, broker_id, proposal)
        if isinstance(stored, zp.LeaderAndIsr) and stored == self._ctx.states[proposal.key]:
            return stored
        return ErrorCode.INVALID_UPDATE_VERSION

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> zp.ProducerIdBlock:
        """AllocateProducerIds (KIP-730): the next producer-id block, for a live broker's current
        registration only, as Kafka's controller checks it."""
        return await self._zk.events.call(lambda: self._allocate_producer_ids(broker_id, broker_epoch))

    async def _allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> zp.ProducerIdBlock:
        self._check_active()
        broker = self._ctx.brokers.get(broker_id)
        if broker is None:
            raise BrokerIdNotRegisteredError(f"Broker {broker_id} is not registered")
        if broker_epoch != broker.epoch:
            raise StaleBrokerEpochError(f"Broker {broker_id} epoch {broker_epoch} is not {broker.epoch}")
        return await reserve_block(self._zk, broker_id)

    async def _rebalance_periodically(self) -> None:
        while True:
            await self._clock.sleep(self._rebalance.interval_s)
            self._zk.submit(self.elect_preferred_leaders)

    async def _ask_log_ends_periodically(self) -> None:
        """Partitions waiting to compare their ISR members' logs are elected on the broker change that
        brings the last member back; one whose members did not all answer then is asked again here."""
        while True:
            await self._clock.sleep(LOG_END_RETRY_S)
            if self._partitions.ready_for_longest_log(self._ctx.electable()):
                self._zk.submit(self._elect_longest_logs)

    async def _elect_longest_logs(self) -> None:
        if not self.active:
            return
        changed = await self._partitions.elect_longest_logs(self._ctx.electable())
        if changed:
            self._send_changes(changed)
            self._send_metadata(changed)

    async def elect_preferred_leaders(self) -> None:
        """Hand leadership back to preferred replicas (the first of each assignment) on every broker
        whose share of partitions led by someone else exceeds leader.imbalance.per.broker.percentage. Not
        while any partition is being reassigned, as Kafka's checkAndTriggerAutoLeaderRebalance: a move
        elects the leader it ends with."""
        if not self.active:
            return
        if self._ctx.reassignments:
            log.info("[Controller id=%d] auto leader rebalance skipped: %d partition(s) being reassigned",
                     self._broker_id, len(self._ctx.reassignments))
            return
        ctx = self._ctx
        live = ctx.electable()
        preferred: dict[int, list[TopicPartition]] = {}
        for key in ctx.states:
            if not self._deletions.is_queued(key[0]):  # a topic held for deletion keeps its leaders, as in Kafka
                preferred.setdefault(ctx.replicas(key)[0], []).append(key)
        changed: set[TopicPartition] = set()
        for broker_id, keys in preferred.items():
            elsewhere = [k for k in keys if ctx.states[k].leader != broker_id]
            if broker_id not in live or len(elsewhere) * 100 <= self._rebalance.max_imbalance_percent * len(keys):
                continue
            for key in elsewhere:
                if await self._partitions.transition(
                        key, lambda state: preferred_election(state, broker_id, self.epoch), attempts=1):
                    changed.add(key)
        if changed:
            log.info("[Controller id=%d] moved %d partition(s) back to their preferred leader", self._broker_id,
                     len(changed))
            self._send_changes(changed)
            self._send_metadata(changed)

    # Administrator requests: ElectLeaders and partition reassignment (KIP-460, KIP-455)

    async def elect_leaders(self, election_type: ElectionType,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ElectionOutcome]:
        """ElectLeaders: one election per partition, every partition when `partitions` is None."""
        return await self._zk.events.call(lambda: self._elect_leaders(election_type, partitions))

    async def _elect_leaders(self, election_type: ElectionType,
                             partitions: list[TopicPartition] | None) -> dict[TopicPartition, ElectionOutcome]:
        self._check_active()
        live = self._ctx.electable()
        outcomes = {key: ElectionOutcome.TOPIC_BEING_DELETED if self._deletions.is_queued(key[0]) else
                    await self._partitions.elect_on_request(key, election_type, live)
                    for key in (sorted(self._ctx.states) if partitions is None else partitions)}
        changed = {key for key, outcome in outcomes.items() if outcome == ElectionOutcome.ELECTED}
        if changed:
            log.info("[Controller id=%d] %s election moved the leader of %d partition(s)", self._broker_id,
                     election_type.name.lower(), len(changed))
            self._send_changes(changed)
            self._send_metadata(changed)
        return outcomes

    async def alter_reassignments(self, targets: Targets) -> dict[TopicPartition, Exception | None]:
        """AlterPartitionReassignments: start moving each partition to its target replicas (None cancels
        an ongoing move). The move finishes in the background once every target replica is in sync."""
        return await self._zk.events.call(lambda: self._alter_reassignments(targets))

    async def _alter_reassignments(self, targets: Targets) -> dict[TopicPartition, Exception | None]:
        self._check_active()
        return await self._reassignments.alter(targets)

    def list_reassignments(self, partitions: list[TopicPartition] | None) -> dict[TopicPartition, Reassignment]:
        """ListPartitionReassignments: the ongoing moves, of `partitions` only when given."""
        self._check_active()
        return self._reassignments.list(partitions)

    async def _on_reassign_partitions(self, _: ZkEvent) -> None:
        """/admin/reassign_partitions, as tools using ZooKeeper directly write it: start those moves
        and delete the znode (Kafka 2.4+ keeps ongoing moves in /brokers/topics/T instead)."""
        node = await self._zk.get(zp.REASSIGN_PARTITIONS, watch=ev.REASSIGN_PARTITIONS)
        if not self.active or node is None:
            return
        try:
            targets: Targets = dict(zp.decode_reassignment(node[0]))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("[Controller id=%d] ignoring malformed %s: %s", self._broker_id, zp.REASSIGN_PARTITIONS, exc)
            targets = {}
        for key, error in (await self._reassignments.alter(targets)).items():
            if error is not None:
                log.warning("[Controller id=%d] reassignment of %s-%d refused: %s", self._broker_id, *key, error)
        await self._writer.delete(zp.REASSIGN_PARTITIONS)

    async def _on_preferred_replica_election(self, _: ZkEvent) -> None:
        """/admin/preferred_replica_election, as tools using ZooKeeper directly write it."""
        node = await self._zk.get(zp.PREFERRED_REPLICA_ELECTION, watch=ev.PREFERRED_REPLICA_ELECTION)
        if not self.active or node is None:
            return
        try:
            partitions = zp.decode_preferred_election(node[0])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("[Controller id=%d] ignoring malformed %s: %s", self._broker_id,
                        zp.PREFERRED_REPLICA_ELECTION, exc)
            partitions = []
        await self._elect_leaders(ElectionType.PREFERRED, partitions)
        await self._writer.delete(zp.PREFERRED_REPLICA_ELECTION)
