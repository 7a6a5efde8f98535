"""Partition reassignment (KIP-455, Kafka's reassignment part of KafkaController): a move widens the
partition's replicas to target + original, waits until every target replica is in sync, then settles
on the target: a leader among it, the dropped replicas stopped and deleted. Ongoing moves live in
/brokers/topics/T's adding and removing replicas, so a new controller picks them up.

Moves come from AlterPartitionReassignments and from /admin/reassign_partitions (tools that write
ZooKeeper directly); a move is checked for completion whenever the partition's ISR changes.
"""

from __future__ import annotations

import logging

from typing import Callable

from pybroker.common.topic import TopicPartition
from pybroker.zk import paths as zp
from pybroker.controller.context import ControllerContext
from pybroker.controller.election import Reassignment, check_replicas, new_leader_epoch, reassignment_election
from pybroker.controller.errors import InvalidReplicaAssignmentError, NoReassignmentInProgressError, UnknownTopicError
from pybroker.controller.partition_state import PartitionStateMachine
from pybroker.controller.replica_state import removed_replicas
from pybroker.controller.requests import BrokerRequests
from pybroker.controller.zk_writer import FencedZkWriter

log = logging.getLogger("pybroker.controller")

Targets = dict[TopicPartition, tuple[int, ...] | None]  # None cancels


class Reassignments:
    def __init__(self, ctx: ControllerContext, writer: FencedZkWriter, partitions: PartitionStateMachine,
                 requests: BrokerRequests, controller_id: int, queued_for_deletion: Callable[[str], bool]):
        """A topic queued for deletion is not moved (Kafka's maybeTriggerPartitionReassignment)."""
        self._ctx = ctx
        self._queued_for_deletion = queued_for_deletion
        self._writer = writer
        self._partitions = partitions
        self._requests = requests
        self._id = controller_id

    def load(self, topic: str, assignment: zp.TopicAssignment) -> None:
        """The ongoing moves stored in a topic's assignment (a previous controller started them)."""
        for partition in set(assignment.adding) | set(assignment.removing):
            replicas = assignment.partitions[partition]
            adding, removing = assignment.adding.get(partition, ()), assignment.removing.get(partition, ())
            self._ctx.reassignments.setdefault(TopicPartition(topic, partition), Reassignment(
                tuple(r for r in replicas if r not in removing), tuple(r for r in replicas if r not in adding)))

    def list(self, partitions: list[TopicPartition] | None) -> dict[TopicPartition, Reassignment]:
        """The ongoing moves, of `partitions` only when given."""
        return {key: move for key, move in sorted(self._ctx.reassignments.items())
                if partitions is None or key in partitions}

    async def alter(self, targets: Targets) -> dict[TopicPartition, Exception | None]:
        """Start moving each partition to its target replicas, or cancel its move; per-partition errors."""
        results: dict[TopicPartition, Exception | None] = {}
        started: set[TopicPartition] = set()
        cancelled: dict[TopicPartition, Reassignment] = {}
        for key, target in targets.items():
            try:
                ongoing = self._plan(key, target)
            except (UnknownTopicError, InvalidReplicaAssignmentError, NoReassignmentInProgressError) as exc:
                results[key] = exc
                continue
            results[key] = None
            if target is None and ongoing is not None:
                cancelled[key] = ongoing
            elif key in self._ctx.reassignments:
                started.add(key)
        for topic in sorted({key[0] for key in started}):
            await self._write_assignment(topic)
        for key in sorted(started):
            log.info("[Controller id=%d] reassigning %s-%d to %s", self._id, *key,
                     list(self._ctx.reassignments[key].target))
            await self._partitions.transition(key, lambda state: new_leader_epoch(state, self._writer.epoch))
        if started:
            self._requests.leader_and_isr(started, self._ctx.brokers, self._writer.epoch)
        for key, ongoing in sorted(cancelled.items()):
            await self._finish(key, ongoing.original, ongoing.adding)
        for key in sorted(started):
            await self.complete_if_caught_up(key)
        self._requests.update_metadata(self._writer.epoch, set(started) | set(cancelled))
        return results

    def _plan(self, key: TopicPartition, target: tuple[int, ...] | None) -> Reassignment | None:
        """Record the move of `key` in the context (the caller writes it to ZooKeeper); returns the
        ongoing move that `target` replaces, if any."""
        ctx = self._ctx
        if key not in ctx.states:
            raise UnknownTopicError(f"Topic partition {key[0]}-{key[1]} does not exist.")
        if self._queued_for_deletion(key[0]):
            log.info("[Controller id=%d] skipping reassignment of %s-%d since the topic is being deleted", self._id,
                     *key)
            raise UnknownTopicError("The partition does not exist.")
        ongoing = ctx.reassignments.get(key)
        if target is None:
            if ongoing is None:
                raise NoReassignmentInProgressError(f"No reassignment in progress for {key[0]}-{key[1]}.")
            return ongoing
        if not target:
            raise InvalidReplicaAssignmentError("The target replica list must not be empty.")
        check_replicas(target, set(ctx.brokers))
        original = ongoing.original if ongoing else ctx.replicas(key)
        if target != original:
            ctx.reassignments[key] = Reassignment(target, original)
            ctx.set_replicas(key, ctx.reassignments[key].replicas)
        return ongoing

    async def _write_assignment(self, topic: str) -> None:
        """/brokers/topics/T with the ongoing moves' adding and removing replicas, as Kafka keeps them."""
        ongoing = {key[1]: move for key, move in self._ctx.reassignments.items() if key[0] == topic}
        assignment = self._ctx.assignments[topic]
        await self._writer.set_topic(topic, zp.encode_topic(
            assignment.partitions, assignment.topic_id or "",
            adding={p: m.adding for p, m in ongoing.items() if m.adding},
            removing={p: m.removing for p, m in ongoing.items() if m.removing}))

    async def complete_if_caught_up(self, key: TopicPartition) -> None:
        move = self._ctx.reassignments.get(key)
        state = self._ctx.states.get(key)
        if move is not None and state is not None and move.caught_up(state.isr):
            await self._finish(key, move.target, move.removing)

    async def _finish(self, key: TopicPartition, replicas: tuple[int, ...], dropped: tuple[int, ...]) -> None:
        """Settle `key` on `replicas`: a leader among them, an ISR of them only, the dropped replicas
        stopped and deleted, and /brokers/topics/T without the move."""
        ctx = self._ctx
        live = ctx.electable()
        await self._partitions.transition(
            key, lambda state: reassignment_election(state, replicas, live, self._writer.epoch))
        del ctx.reassignments[key]
        ctx.set_replicas(key, replicas)
        await self._write_assignment(key[0])
        log.info("[Controller id=%d] reassignment of %s-%d finished on %s", self._id, *key, list(replicas))
        self._requests.leader_and_isr({key}, ctx.brokers, self._writer.epoch)
        self._requests.stop_replicas(removed_replicas(ctx, key, dropped), self._writer.epoch)
        self._requests.update_metadata(self._writer.epoch, {key})
