"""The broker's share coordinator: the pure ``ShareStateShard``, ``__share_group_state`` and the state RPCs.

The internal topic is created on first use (FindCoordinator with key type SHARE, or the first state request) with
``share.coordinator.state.topic.*``: as Kafka creates it, ``cleanup.policy=delete`` with unlimited retention (its
ShareSnapshot records make the older ones redundant, and the coordinator deletes those every
``share.coordinator.state.topic.prune.interval.ms``: ``pruning.py``; a share-partition idle for
``share.coordinator.cold.partition.snapshot.interval.ms`` gets a fresh snapshot so that it holds nothing back), ``min.insync.replicas`` from ``share.coordinator.state.topic.min.isr``. The leader of a partition
coordinates the share-partitions whose key hashes to it: becoming leader replays the partition (answered
COORDINATOR_LOAD_IN_PROGRESS meanwhile), resigning forgets them (NOT_COORDINATOR), as for the group and transaction
coordinators (``coordinator_loads.py``).

Each request is answered per share-partition once its records are held by the in-sync replicas (acks=-1, within
``share.coordinator.write.timeout.ms``); a write the ISR did not take in time is COORDINATOR_NOT_AVAILABLE and
is retried by the partition leader's persister. Its records stay in the log, uncommitted, and in the shard: an
answer that writes nothing (a read) therefore waits until the high watermark passes the log end, so that no one
reads a state a leader failure can still take back.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from functools import partial
from typing import Any, Callable, Iterable, Iterator, TypeVar

from pybroker.common.clock import Clock
from pybroker.common.config import BrokerConfig
from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import TopicPartition
from pybroker.coordinator.loader import decoded_records
from pybroker.coordinator.share_state.pruning import SnapshotOffsets
from pybroker.coordinator.share_state.records import (
    ShareKey,
    StateBatch,
    StateEntry,
    decode_state_record,
    partition_of,
    record_type,
)
from pybroker.coordinator.share_state.shard import Answer, ShareStateShard
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from pybroker.records import iter_batches
from pybroker.replication.errors import ReplicaTimeoutError
from pybroker.replication.manager import ReplicaManager
from pybroker.server.coordinator_loads import CoordinatorPartitions, LoadSteps, LogSource
from pybroker.server.error_mapping import error_code_for
from pybroker.server.internal_topic import InternalTopic, MetadataSource

log = logging.getLogger("pybroker.coordinator")

SHARE_STATE_TOPIC = "__share_group_state"
MAX_STATE_BATCHES = 10000
"""State batches one share-partition may hold: the most records a share-partition has in flight
(``group.share.partition.max.record.locks`` at its upper bound), each its own batch at worst."""

Operation = Callable[[], Answer]
StateRequest = (InitializeShareGroupStateRequest | ReadShareGroupStateRequest | WriteShareGroupStateRequest
                | DeleteShareGroupStateRequest | ReadShareGroupStateSummaryRequest)
Result = TypeVar("Result")


class ShareStateService:
    def __init__(self, config: BrokerConfig, metadata: MetadataSource, replicas: ReplicaManager, logs: LogSource,
                 io: IoExecutor, clock: Clock) -> None:
        self._clock = clock.wall_ms
        self._time = clock
        self.num_partitions: int = config["share.coordinator.state.topic.num.partitions"]
        self.shard = ShareStateShard(updates_per_snapshot=config["share.coordinator.snapshot.update.records.per.snapshot"],
                                     max_state_batches=MAX_STATE_BATCHES)
        min_isr: int = config["share.coordinator.state.topic.min.isr"]
        segment_bytes: int = config["share.coordinator.state.topic.segment.bytes"]
        self.topic = InternalTopic(
            metadata, replicas, SHARE_STATE_TOPIC, partitions=self.num_partitions,
            replication_factor=config["share.coordinator.state.topic.replication.factor"],
            configs=lambda factor: {"cleanup.policy": "delete", "retention.ms": "-1",
                                    "segment.bytes": str(segment_bytes),
                                    "min.insync.replicas": str(min(min_isr, factor))},
            replication_timeout_ms=config["share.coordinator.write.timeout.ms"], clock=clock.wall_ms)
        self._replicas = replicas
        self._write_timeout_s = config["share.coordinator.write.timeout.ms"] / 1000
        self._prune_interval_s = config["share.coordinator.state.topic.prune.interval.ms"] / 1000
        self._cold_interval_s = config["share.coordinator.cold.partition.snapshot.interval.ms"] / 1000
        self.snapshots = SnapshotOffsets()
        self.partitions = CoordinatorPartitions(SHARE_STATE_TOPIC, logs, io, LoadSteps(
            replay=_replay, apply=self._apply, unload=self._unload, keys="share-partition(s)", epoch="leader epoch"))
        self.on_leadership_change = self.partitions.on_leadership_change

    def partition_of(self, key: ShareKey) -> int:
        return partition_of(key, self.num_partitions)

    def coordinator_node(self, key: ShareKey) -> int | None:
        """The broker leading the share-partition's partition of ``__share_group_state``."""
        return self.topic.leader(self.partition_of(key))

    def _apply(self, partition: int, _leader_epoch: int, entries: list[tuple[StateEntry, int]]) -> int:
        self.shard.replay([entry for entry, _ in entries])
        for entry, offset in entries:
            self.snapshots.note(partition, entry.key, entry.record_type, entry.state is None, offset)
        return sum(1 for key in self.shard.states if self.partition_of(key) == partition)

    def _unload(self, partition: int) -> None:
        self.shard.drop(lambda key: self.partition_of(key) == partition)
        self.snapshots.unload(partition)

    def start(self) -> asyncio.Task[None]:
        """Prune the partitions this broker coordinates every ``share.coordinator.state.topic.prune.interval.ms``,
        and snapshot their cold share-partitions every ``share.coordinator.cold.partition.snapshot.interval.ms``."""
        return asyncio.get_running_loop().create_task(self._housekeeping(), name="share-state-prune")

    async def _housekeeping(self) -> None:
        clock = self._time
        next_prune = next_cold = clock.monotonic()
        while True:
            now = clock.monotonic()
            if now >= next_cold:
                next_cold = now + self._cold_interval_s
                await self.snapshot_cold()
            if now >= next_prune:
                next_prune = now + self._prune_interval_s
                self.prune()
            await clock.sleep(max(min(next_prune, next_cold) - clock.monotonic(), 0.0))

    async def snapshot_cold(self) -> None:
        """Write a fresh snapshot of each loaded share-partition whose last one is older than the cold interval,
        as Kafka does: an idle share-partition's old snapshot would otherwise hold back the pruning of its
        partition for good."""
        cold = self.shard.cold(self._clock() - int(self._cold_interval_s * 1000))
        for key in cold:
            if self.partition_of(key) in self.partitions.loaded:
                answer = await self._run(key, partial(self.shard.snapshot, key, self._clock()))
                if answer.error is not ErrorCode.NONE:
                    log.info("A cold snapshot of %s was not written: %s", key, answer.error.name)

    def prune(self) -> None:
        """Delete the redundant records of each loaded partition (DeleteRecords on this leader; the followers
        follow the log start offset). Only records the in-sync replicas hold are ever deleted."""
        for partition in sorted(self.partitions.loaded):
            try:
                leader = self._replicas.leader_partition(SHARE_STATE_TOPIC, partition)
                high_watermark = leader.log.high_watermark
                offset = min(self.snapshots.redundant_before(partition, high_watermark), high_watermark)
                if offset > leader.log.log_start_offset:
                    leader.delete_records(offset)
                    log.debug("Pruned %s-%d below offset %d", SHARE_STATE_TOPIC, partition, offset)
            except Exception as exc:  # lost leadership meanwhile: the next leader prunes
                log.info("Pruning %s-%d failed: %s", SHARE_STATE_TOPIC, partition, exc)

    async def _run(self, key: ShareKey, operation: Operation) -> Answer:
        """Run ``operation`` on the shard if this broker coordinates ``key``; its records on the ISR first. A request
        that starts the creation of ``__share_group_state`` gets the not-owned error at once, as the other
        coordinators answer (``InternalTopic.ensure``); the persister sending it retries."""
        try:
            await self.topic.ensure()
        except Exception as exc:
            return Answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc))
        partition = self.partition_of(key)
        if partition not in self.partitions.loaded:
            code = self.partitions.not_owned_error(partition)
            return Answer(code, code.message)
        saved = self.shard.saved(key)
        answer = operation()
        if not answer.records:
            return await self._committed(key, partition, answer)
        try:
            end = self.topic.append(partition, answer.records)
        except Exception as exc:
            self.shard.restore(key, saved)  # not in the log: neither may it be in the shard
            return _failed(key, exc)
        for index, (raw_key, value) in enumerate(answer.records):
            self.snapshots.note(partition, key, record_type(raw_key), value is None, end - len(answer.records) + index)
        try:
            await self.topic.replicated(partition, end)
        except Exception as exc:
            return _failed(key, exc)
        return answer

    async def _committed(self, key: ShareKey, partition: int, answer: Answer) -> Answer:
        """``answer`` (an operation that wrote nothing) once every record it may reflect is held by the ISR: the
        shard applies a write's records before they replicate, and a write that timed out leaves them in the log,
        uncommitted, where a leader failure may still drop them. Kafka's share coordinator answers only from
        committed state too."""
        clock = self._time
        deadline = clock.monotonic() + self._write_timeout_s
        try:
            end = self._replicas.leader_partition(SHARE_STATE_TOPIC, partition).log.log_end_offset
            while self._replicas.leader_partition(SHARE_STATE_TOPIC, partition).log.high_watermark < end:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    raise ReplicaTimeoutError(f"{SHARE_STATE_TOPIC}-{partition} not replicated up to offset {end}")
                await self._replicas.wait_for_append([TopicPartition(SHARE_STATE_TOPIC, partition)], remaining)
        except Exception as exc:
            return _failed(key, exc)
        return answer

    # ------------------------------------------------------------------ the RPCs, one share-partition at a time

    async def _each(self, request: StateRequest, run: Callable[[ShareKey, Any], Operation],
                    answer: Callable[[Any, Answer], Result]) -> list[tuple[uuid.UUID, list[Result]]]:
        """Each share-partition of ``request`` run on the shard in turn (``run(key, partition data)``), and its
        answer (``answer(partition data, Answer)``), by topic id."""
        results = []
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                key = ShareKey(request.group_id, topic.topic_id, p.partition)
                parts.append(answer(p, await self._run(key, run(key, p))))
            results.append((topic.topic_id, parts))
        return results

    async def initialize(self, request: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
        R = InitializeShareGroupStateResponse
        done = await self._each(request, lambda key, p: partial(self.shard.initialize, key, p.state_epoch,
                                                                p.start_offset, self._clock()),
                                lambda p, a: R.PartitionResult(partition=p.partition, error_code=a.error,
                                                               error_message=a.message))
        return R(results=[R.InitializeStateResult(topic_id=t, partitions=parts) for t, parts in done])

    async def read(self, request: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
        R = ReadShareGroupStateResponse

        def answer(p: ReadShareGroupStateRequest.PartitionData, a: Answer
                   ) -> ReadShareGroupStateResponse.PartitionResult:
            state = a.state if a.error is ErrorCode.NONE else None
            return R.PartitionResult(
                partition=p.partition, error_code=a.error, error_message=a.message,
                state_epoch=state.state_epoch if state else 0, start_offset=state.start_offset if state else -1,
                state_batches=[R.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                            delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                               for b in (state.batches if state else [])])
        done = await self._each(request, lambda key, p: partial(self.shard.read, key, p.leader_epoch), answer)
        return R(results=[R.ReadStateResult(topic_id=t, partitions=parts) for t, parts in done])

    async def write(self, request: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
        R = WriteShareGroupStateResponse

        def run(key: ShareKey, p: WriteShareGroupStateRequest.PartitionData) -> Operation:
            batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in p.state_batches]
            return partial(self.shard.write, key, p.state_epoch, p.leader_epoch, p.start_offset, batches,
                           self._clock())
        done = await self._each(request, run, lambda p, a: R.PartitionResult(
            partition=p.partition, error_code=a.error, error_message=a.message))
        return R(results=[R.WriteStateResult(topic_id=t, partitions=parts) for t, parts in done])

    async def delete(self, request: DeleteShareGroupStateRequest) -> DeleteShareGroupStateResponse:
        R = DeleteShareGroupStateResponse
        done = await self._each(request, lambda key, _p: partial(self.shard.delete, key),
                                lambda p, a: R.PartitionResult(partition=p.partition, error_code=a.error,
                                                               error_message=a.message))
        return R(results=[R.DeleteStateResult(topic_id=t, partitions=parts) for t, parts in done])

    async def summary(self, request: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
        """ReadShareGroupStateSummary: the state without its batches, and nothing recorded."""
        R = ReadShareGroupStateSummaryResponse

        def answer(p: ReadShareGroupStateSummaryRequest.PartitionData, a: Answer
                   ) -> ReadShareGroupStateSummaryResponse.PartitionResult:
            state = a.state if a.error is ErrorCode.NONE else None
            return R.PartitionResult(
                partition=p.partition, error_code=a.error, error_message=a.message,
                state_epoch=state.state_epoch if state else 0, leader_epoch=state.leader_epoch if state else -1,
                start_offset=state.start_offset if state else -1,
                delivery_complete_count=state.delivery_complete_count() if state else -1)
        done = await self._each(request, lambda key, _p: partial(self.shard.summary, key), answer)
        return R(results=[R.ReadStateSummaryResult(topic_id=t, partitions=parts) for t, parts in done])


def _failed(key: ShareKey, exc: Exception) -> Answer:
    """State the ISR does not hold (yet): NOT_COORDINATOR when leadership moved, else COORDINATOR_NOT_AVAILABLE
    (the persister retries both)."""
    code = error_code_for(exc)
    log.warning("The share state of %s is not replicated: %s", key, code.name)
    code = ErrorCode.NOT_COORDINATOR if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR) \
        else ErrorCode.COORDINATOR_NOT_AVAILABLE
    return Answer(code, code.message)


def _replay(chunks: Iterable[bytes]) -> Iterator[tuple[StateEntry, int]]:
    """Each record with the offset of its batch: the coordinator writes one record per batch (see ``_run``)."""
    for chunk in chunks:
        for batch in iter_batches(chunk):
            if not batch.is_control:
                for entry in decoded_records(batch, decode_state_record, SHARE_STATE_TOPIC):
                    yield entry, batch.base_offset
