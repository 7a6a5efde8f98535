"""Partition states and their transitions (Kafka's PartitionStateMachine): a partition is
NonExistent until the controller writes its first state (New -> Online, `create`), Online while its
leader's broker is registered and Offline otherwise. Every transition is an election from
election.py (pure) written through the fenced writer; the context follows what was written.

A leader may change the ISR between the controller's read and its write (the write is conditional
on the state's znode version): the conflict brings in the stored state and the election runs again
on it, a bounded number of times.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import AbstractSet, Awaitable, Callable, Mapping

from pybroker.common.topic import TopicPartition
from pybroker.zk import paths as zp
from pybroker.controller.context import ControllerContext
from pybroker.controller.election import (
    ElectionOutcome,
    ElectionType,
    LogEnd,
    initial_state,
    longest_log_election,
    needs_unclean_election,
    offline_election,
    request_election,
)
from pybroker.zk.client import ZkClient
from pybroker.controller.zk_writer import FencedZkWriter, StateConflict

log = logging.getLogger("pybroker.controller")

ATTEMPTS = 3
UNCLEAN_ELECTION = "unclean.leader.election.enable"

Decision = Callable[[zp.LeaderAndIsr], "zp.LeaderAndIsr | None"]
LogEndQuery = Callable[[Mapping[TopicPartition, tuple[int, ...]]], Awaitable[dict[TopicPartition, dict[int, LogEnd]]]]
"""Asks brokers for their replicas' log ends: ``{partition: brokers}`` to ``{partition: {broker: end}}``;
a broker that did not answer is left out."""


class PartitionState(Enum):
    NON_EXISTENT = "NonExistentPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


def partition_state(ctx: ControllerContext, key: TopicPartition) -> PartitionState:
    state = ctx.states.get(key)
    if state is None:
        return PartitionState.NON_EXISTENT
    return PartitionState.ONLINE if state.leader in ctx.brokers else PartitionState.OFFLINE


class PartitionStateMachine:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, writer: FencedZkWriter, *, unclean_default: bool,
                 log_ends: LogEndQuery):
        self._ctx = ctx
        self._zk = zk
        self._writer = writer
        self._unclean_default = unclean_default
        self._log_ends = log_ends

    async def load(self, topic: str, written: dict[TopicPartition, int] | None = None) -> set[TopicPartition]:
        """Adopt the stored state of each of the topic's partitions not known yet; partitions without
        one are new and get their first (New -> Online). Returns the partitions created; `written`
        (when given) receives the zxid of each adopted state's last write."""
        created = set()
        live = set(self._ctx.brokers)
        for partition, replicas in self._ctx.assignments[topic].partitions.items():
            key = TopicPartition(topic, partition)
            if key in self._ctx.states:
                continue
            node = await self._writer.read_partition_state_written(key)
            stored = None if node is None else node[0]
            if node is not None and written is not None:
                written[key] = node[1]
            if stored is None:
                stored = await self._writer.create_partition_state(
                    key, initial_state(replicas, live, self._writer.epoch))
                created.add(key)
            if stored is not None:
                self._ctx.states[key] = stored
        return created

    async def write(self, key: TopicPartition, state: zp.LeaderAndIsr) -> None:
        """Write `state` (conditional on its zk_version); on a conflict the context takes the stored
        state and StateConflict is raised."""
        try:
            self._ctx.states[key] = await self._writer.set_partition_state(key, state)
        except StateConflict as conflict:
            if conflict.current is not None:
                self._ctx.states[key] = conflict.current
            raise

    async def transition(self, key: TopicPartition, decide: Decision, *, attempts: int = ATTEMPTS) -> bool:
        """Write what `decide` makes of the partition's state, re-deciding after a conflict; True
        when a new state was written."""
        for _ in range(attempts):
            state = self._ctx.states.get(key)
            new = None if state is None else decide(state)
            if new is None:
                return False
            try:
                await self.write(key, new)
                return True
            except StateConflict:
                continue
        return False

    async def elect_offline(self, live: set[int], restarted: AbstractSet[int] = frozenset()) -> set[TopicPartition]:
        """Online/Offline -> Online where possible: dead brokers leave every ISR and partitions whose
        leader is not in `live` get a new one (unclean only where the topic allows it); `restarted`
        (bounced) brokers leave first (see `offline_election`)."""
        changed = await self.elect_longest_logs(live - restarted)
        for key in list(self._ctx.states):
            for _ in range(ATTEMPTS):
                state = self._ctx.states[key]
                replicas = self._ctx.replicas(key)
                here = live - self._ctx.offline_on(key)  # replicas in a failed log dir are dead here
                unclean = needs_unclean_election(state, replicas, here) and await self._unclean_enabled(key[0])
                new = offline_election(state, replicas, here, self._writer.epoch, unclean=unclean,
                                       restarted=restarted)
                if new is None:
                    break
                try:
                    await self.write(key, new)
                except StateConflict:
                    continue
                changed.add(key)
                break
        return changed

    def ready_for_longest_log(self, live: set[int]) -> dict[TopicPartition, tuple[int, ...]]:
        """Partitions waiting with ``elect_longest_log`` whose ISR members are all back, with that ISR."""
        return {key: state.isr for key, state in self._ctx.states.items()
                if state.elect_longest_log and set(state.isr) <= live - self._ctx.offline_on(key)}

    async def elect_longest_logs(self, live: set[int]) -> set[TopicPartition]:
        """Partitions waiting with ``elect_longest_log`` whose ISR members are all back: ask each member
        for its log end and elect the one furthest ahead. A partition some member did not answer for
        keeps waiting (the controller asks again later)."""
        ready = self.ready_for_longest_log(live)
        if not ready:
            return set()
        ends = await self._log_ends(ready)
        changed = set()
        for key in ready:
            found = ends.get(key, {})
            replicas = self._ctx.replicas(key)

            def decide(state: zp.LeaderAndIsr) -> zp.LeaderAndIsr | None:
                if not state.elect_longest_log or set(state.isr) != set(found):
                    return None
                return longest_log_election(state, replicas, found, self._writer.epoch)

            if await self.transition(key, decide):
                log.info("Partition %s-%d: leader %d elected from the longest log of its ISR "
                         "(leader epoch, log end): %s", *key, self._ctx.states[key].leader, found)
                changed.add(key)
        return changed

    def restarted_since_written(self, written: dict[TopicPartition, int]) -> dict[TopicPartition, set[int]]:
        """Per partition, the leader and ISR members registered after its state was last written.

        A new controller did not see the registrations that came before it, so it cannot tell a
        bounce (KIP-380) from a change of registration the way processBrokerChange does. ZooKeeper can:
        a process epoch (the czxid of the broker process's first registration) newer than the state's
        mzxid means that broker restarted since the state was written, so it may have lost an unflushed
        tail; a broker after an unclean shutdown whose recovery truncated its log is one. A broker that
        only re-registered after losing its session (a ZooKeeper restart expires every session) kept its
        process and its log, and is not counted: chaos round 6009 counted those as restarted, left the
        ISR to the one member that had really lost power, and elected it when it came back. Any
        change the controller or a leader made after a registration writes the state again (a newer
        mzxid): a broker that rejoined the ISR by catching up, or one a controller already handled as
        bounced, is not counted."""
        restarted: dict[TopicPartition, set[int]] = {}
        for key, zxid in written.items():
            state = self._ctx.states.get(key)
            if state is None:
                continue
            newer = {b for b in {state.leader, *state.isr}
                     if b in self._ctx.brokers and self._ctx.brokers[b].process_epoch > zxid}
            if newer:
                restarted[key] = newer
        return restarted

    async def elect_restarted(self, restarted: dict[TopicPartition, set[int]], live: set[int]) -> set[TopicPartition]:
        """Handle each partition's restarted brokers as failed (processBrokerChange's bounce): out of the
        ISR, leadership to another live ISR member, at a new leader epoch. When the members that did
        not restart are all down, they stay the ISR and the partition waits for one of them (chaos
        round 2003: electing a restarted member that had lost power truncated every replica to its
        empty log). When every member restarted, the next offline election brings one back, at a new
        epoch again (the sole-replica rule), so a full cluster restart comes up."""
        changed = set()
        for key, brokers in restarted.items():
            replicas, others = self._ctx.replicas(key), live - brokers

            def decide(state: zp.LeaderAndIsr) -> zp.LeaderAndIsr | None:
                return offline_election(state, replicas, others, self._writer.epoch, restarted=brokers)

            if await self.transition(key, decide):
                changed.add(key)
        return changed

    async def elect_on_request(self, key: TopicPartition, election_type: ElectionType, live: set[int]
                               ) -> ElectionOutcome:
        """ElectLeaders for one partition."""
        outcome = ElectionOutcome.UNKNOWN_PARTITION
        for _ in range(ATTEMPTS):
            state = self._ctx.states.get(key)
            if state is None:
                break
            outcome, new = request_election(election_type, state, self._ctx.replicas(key), live,
                                            self._writer.epoch)
            if new is None:
                break
            try:
                await self.write(key, new)
            except StateConflict:
                outcome = ElectionOutcome.NO_ELIGIBLE_LEADER
                continue
            break
        return outcome

    async def _unclean_enabled(self, topic: str) -> bool:
        """The topic's unclean.leader.election.enable override, else the broker default; read when an
        election needs it, as Kafka's controller does, so a changed override applies at once."""
        node = await self._zk.get(zp.topic_config_path(topic))
        value = zp.decode_topic_config(node[0]).get(UNCLEAN_ELECTION) if node is not None else None
        return self._unclean_default if value is None else value.strip().lower() == "true"
