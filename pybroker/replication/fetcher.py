"""Follower fetching: one task per leader broker, covering every partition this broker follows there.

Each partition starts in the truncating state: the follower asks the leader (OffsetForLeaderEpoch)
where its own latest epoch ends and cuts off anything past that (KIP-101; when the leader does not
know the epoch, KIP-279's rule takes the follower's end of the epoch the leader answered with and
asks again). Then it fetches from its log end offset, appends what comes back as-is and takes the
leader's high watermark, bounded by its own log end. A fetch answered OFFSET_OUT_OF_RANGE makes it
ask the leader (ListOffsets) for its log end and start, as Kafka's fetchOffsetAndTruncate: a log
longer than the leader's is cut to the leader's end, one ending before the leader's start restarts
empty at that start.

The `leader-epoch-checkpoint` writes all run on the broker's I/O executor, an answer's files together, so a
fetch answer bringing new epochs to hundreds of partitions (after a mass leader move) does not stall the
event loop. The order is Kafka's: a new epoch is durable before the batches that bring it are appended
(LeaderEpochFileCache.assign flushes at once), so the checkpoint never lacks an epoch of the log; a
truncation or log start move is written after the log changed (Kafka flushes those in the background, since
start-up cuts the cache to the log again: `partition.epoch_cache_of`), though here before the fetcher's next
step, so an entry past the new log end is gone from the file before anything is appended there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Callable

from pybroker.client.errors import KafkaClientError
from pybroker.common.clock import Clock
from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import TopicPartition
from pybroker.log.log import PartitionLog
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from pybroker.replication.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from pybroker.replication.epoch_writes import EpochWrites
from pybroker.replication.leader_endpoint import LeaderEndPoint
from pybroker.replication.partition import Partition

log = logging.getLogger("pybroker.replication")

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    response_max_bytes: int
    backoff_ms: int


@dataclass(frozen=True, slots=True)
class EpochWriting:
    """Where a fetcher writes its partitions' `leader-epoch-checkpoint` (None: on the loop, tests without a
    broker), and whom it tells when a write fails (the replica manager fails the log dir)."""

    io: IoExecutor | None
    on_failure: Callable[[Partition, PartitionLog, OSError], None]
    """Called with the replica, the log its file belonged to when the write was taken (a log dir move may have
    replaced it since) and the error."""


@dataclass(slots=True)
class _Target:
    leader_epoch: int
    truncating: bool = True
    out_of_range: bool = False
    """The last fetch was refused OFFSET_OUT_OF_RANGE: ask the leader where its log starts and ends."""


class ReplicaFetcher:
    """Fetches for the partitions this broker follows on one leader."""

    def __init__(self, leader_id: int, endpoint: LeaderEndPoint, config: FetcherConfig,
                 partition_of: Callable[[TopicPartition], Partition | None],
                 on_fetched: Callable[[TopicPartition], None], clock: Clock, epochs: EpochWriting):
        self.leader_id = leader_id
        self._epochs = epochs
        self.endpoint = endpoint
        self._config = config
        self._partition_of = partition_of
        self._on_fetched = on_fetched
        self._clock = clock
        self._now_ms = clock.wall_ms
        self._targets: dict[TopicPartition, _Target] = {}
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{leader_id}")

    def add(self, key: TopicPartition, leader_epoch: int) -> None:
        self._targets[key] = _Target(leader_epoch)
        self._wakeup.set()

    def remove(self, key: TopicPartition) -> None:
        self._targets.pop(key, None)

    @property
    def empty(self) -> bool:
        return not self._targets

    async def close(self) -> None:
        # The flag and the wake-up back the cancellation, which Python 3.11's wait_for can swallow
        # when it races with a response.
        self._closing = True
        self._wakeup.set()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self.endpoint.close()

    async def _run(self) -> None:
        while not self._closing:
            if not self._targets:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                if any(t.truncating for t in self._targets.values()):
                    await self._truncate()
                if any(t.out_of_range for t in self._targets.values()):
                    await self._reset_out_of_range()
                if not await self._fetch():
                    await self._clock.sleep(self._config.backoff_ms / 1000)
            except (KafkaClientError, OSError) as exc:
                log.info("Fetch from leader %d failed: %s", self.leader_id, exc)
                await self._clock.sleep(self._config.backoff_ms / 1000)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Replica fetcher for leader %d failed", self.leader_id)
                await self._clock.sleep(self._config.backoff_ms / 1000)

    async def _truncate(self) -> None:
        try:
            await self._truncate_to_leaders()
        finally:
            await self._write_changed_epochs()

    async def _truncate_to_leaders(self) -> None:
        wanted = {key: target for key, target in self._targets.items() if target.truncating}
        topics: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
        for (topic, index), target in wanted.items():
            partition = self._partition_of(TopicPartition(topic, index))
            if partition is None:
                continue
            latest = partition.epoch_cache.latest_epoch
            if latest == UNDEFINED_EPOCH:  # nothing with an epoch: keep only what was committed
                partition.truncate_to(partition.log.high_watermark, deferred=True)
                target.truncating = False
                continue
            topics.setdefault(topic, []).append(OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=index, current_leader_epoch=target.leader_epoch, leader_epoch=latest))
        if not topics:
            return
        response = await self.endpoint.offsets_for_leader_epoch(OffsetForLeaderEpochRequest(
            replica_id=self._config.replica_id,
            topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=p)
                    for t, p in topics.items()]))
        for answered in response.topics:
            for result in answered.partitions:
                key = TopicPartition(answered.topic, result.partition)
                partition, truncating = self._partition_of(key), self._targets.get(key)
                if partition is None or truncating is None or result.error_code:
                    continue
                truncating.truncating = not truncate_to_leader(partition, result.leader_epoch, result.end_offset,
                                                               deferred=True)

    async def _reset_out_of_range(self) -> None:
        try:
            await self._reset_to_leaders()
        finally:
            await self._write_changed_epochs()

    async def _reset_to_leaders(self) -> None:
        """Kafka's fetchOffsetAndTruncate for every partition whose fetch offset the leader refused."""
        wanted = {key: target for key, target in self._targets.items() if target.out_of_range}
        ends = await self._list_offsets(wanted, LATEST_TIMESTAMP)
        starts = await self._list_offsets(wanted, EARLIEST_TIMESTAMP)
        for key, target in wanted.items():
            partition = self._partition_of(key)
            if partition is None or key not in ends or key not in starts or partition.is_leader:
                continue
            target.out_of_range = False
            log_end = partition.log.log_end_offset
            if ends[key] < log_end:
                log.warning("Truncating %s-%d from %d to the leader %d's log end %d", key[0], key[1], log_end,
                            self.leader_id, ends[key])
                partition.truncate_to(ends[key], deferred=True)
            elif starts[key] > log_end:
                log.info("Restarting %s-%d at the leader %d's log start %d (local log end %d)", key[0], key[1],
                         self.leader_id, starts[key], log_end)
                partition.truncate_fully_and_start_at(starts[key], deferred=True)

    async def _list_offsets(self, targets: dict[TopicPartition, _Target], timestamp: int) -> dict[TopicPartition, int]:
        """The leader's offsets at ``timestamp`` (LATEST: its log end for a replica) per partition answered."""
        topics: dict[str, list[ListOffsetsRequest.ListOffsetsPartition]] = {}
        for (topic, index), target in targets.items():
            topics.setdefault(topic, []).append(ListOffsetsRequest.ListOffsetsPartition(
                partition_index=index, current_leader_epoch=target.leader_epoch, timestamp=timestamp))
        response = await self.endpoint.list_offsets(ListOffsetsRequest(
            replica_id=self._config.replica_id, isolation_level=0,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=p) for t, p in topics.items()]))
        return {TopicPartition(topic.name, p.partition_index): p.offset
                for topic in response.topics for p in topic.partitions
                if p.error_code == ErrorCode.NONE and p.offset >= 0}

    async def _fetch(self) -> bool:
        """One fetch round; False when nothing could be fetched (then the caller backs off)."""
        config = self._config
        topics: dict[str, list[FetchRequest.FetchPartition]] = {}
        asked: dict[TopicPartition, _Asked] = {}
        for key, target in self._targets.items():
            partition = self._partition_of(key)
            if partition is None or target.truncating or target.out_of_range:
                continue
            asked[key] = _Asked(partition, target, partition.log, partition.log.log_end_offset)
            topics.setdefault(key.topic, []).append(FetchRequest.FetchPartition(
                partition=key.partition, current_leader_epoch=target.leader_epoch,
                fetch_offset=partition.log.log_end_offset, log_start_offset=partition.log.log_start_offset,
                partition_max_bytes=config.max_bytes))
        if not topics:
            return False
        request = FetchRequest(replica_id=config.replica_id, max_wait_ms=config.max_wait_ms, min_bytes=config.min_bytes,
                               max_bytes=config.response_max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                               topics=[FetchRequest.FetchTopic(topic=t, partitions=p) for t, p in topics.items()])
        response = await self.endpoint.fetch(request)
        if response.error_code:
            return False
        answers = [(TopicPartition(answered.topic, data.partition_index), data, _records_of(data))
                   for answered in response.responses for data in answered.partitions]
        written = await self._write_new_epochs(answers, asked)
        progress = True
        try:
            for key, data, records in answers:
                progress &= self._apply(key, data, records, asked.get(key), written)
        finally:
            await self._write_changed_epochs()
        return progress

    def _current(self, key: TopicPartition, asked: _Asked | None) -> bool:
        """Whether the answer for ``key`` still applies: the same replica, still following this leader at the
        epoch it was asked at, its log where it was (a role change or truncation meanwhile voids the answer)."""
        if asked is None or self._targets.get(key) is not asked.target:
            return False
        if self._partition_of(key) is not asked.partition:
            return False
        partition = asked.partition
        return not partition.is_leader and partition.log is asked.log and not partition.log.closed \
            and partition.log.log_end_offset == asked.log_end

    async def _write_new_epochs(self, answers: list[_Answer], asked: dict[TopicPartition, _Asked]
                                ) -> dict[TopicPartition, dict[int, int] | None]:
        """Make durable, together on the I/O executor, the checkpoints of the partitions whose fetched batches
        bring a new epoch; per such partition, the entries written (None: not written, the records wait)."""
        writes = EpochWrites(self._epochs.io)
        queued: dict[TopicPartition, tuple[Partition, PartitionLog, dict[int, int], asyncio.Future[None]]] = {}
        for key, data, records in answers:
            if data.error_code != ErrorCode.NONE or not records or not self._current(key, asked.get(key)):
                continue
            partition = asked[key].partition
            entries = partition.epochs_before_append(records)
            if entries is not None:
                queued[key] = partition, partition.log, entries, writes.add(partition.epoch_write(entries))
                partition.mark_epochs_unwritten()  # the file is ahead of the cache until the append (or a rewrite)
        await writes.write()
        return {key: entries if self._durable(partition, written_log, done) else None
                for key, (partition, written_log, entries, done) in queued.items()}

    async def _write_changed_epochs(self) -> None:
        """Write the checkpoints a truncation or a log start move changed (`Partition.take_epoch_write`), and
        those written for an answer that was then not appended (a role change meanwhile), before the next step
        appends anything."""
        writes = EpochWrites(self._epochs.io)
        queued: list[tuple[Partition, PartitionLog, asyncio.Future[None]]] = []
        for key in self._targets:
            partition = self._partition_of(key)
            write = partition.take_epoch_write() if partition is not None else None
            if partition is not None and write is not None:
                queued.append((partition, partition.log, writes.add(write)))
        await writes.write()
        for partition, written_log, done in queued:
            self._durable(partition, written_log, done)

    def _durable(self, partition: Partition, written_log: PartitionLog, done: asyncio.Future[None]) -> bool:
        """Whether a write made it; a failed one fails the log dir (`EpochWriting.on_failure`)."""
        if done.cancelled():  # the broker stops
            return False
        failure = done.exception()
        if isinstance(failure, OSError):
            self._epochs.on_failure(partition, written_log, failure)
        return failure is None

    def _apply(self, key: TopicPartition, data: FetchResponse.PartitionData, records: bytes, asked: _Asked | None,
               written: dict[TopicPartition, dict[int, int] | None]) -> bool:
        if asked is None or not self._current(key, asked):  # a file written for it is rewritten (`_write_new_epochs`)
            return True
        partition = asked.partition
        if data.error_code == ErrorCode.NONE:
            if key in written and written[key] is None:  # its new epoch is not durable: append nothing
                return False
            partition.append_as_follower(records, leader_high_watermark=data.high_watermark, now_ms=self._now_ms(),
                                         leader_log_start_offset=data.log_start_offset, written=written.get(key),
                                         deferred=True)
            self._on_fetched(key)
            return True
        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            asked.target.out_of_range = True
            return True
        log.debug("Fetch of %s-%d from leader %d: error %d", key[0], key[1], self.leader_id, data.error_code)
        return False


_Answer = tuple[TopicPartition, FetchResponse.PartitionData, bytes]
"""A partition's fetch answer and its records."""


@dataclass(frozen=True, slots=True)
class _Asked:
    """A partition as a fetch asked for it."""

    partition: Partition
    target: _Target
    log: PartitionLog
    """The replica's log when asked: a log dir move swapping it meanwhile voids the answer (its epochs were
    written to the file of the log swapped out)."""
    log_end: int


def _records_of(data: FetchResponse.PartitionData) -> bytes:
    """A decoded answer holds bytes or None: a Spliced file range is only ever sent."""
    records = data.records
    return bytes(records) if isinstance(records, (bytes, bytearray, memoryview)) else b""


def truncate_to_leader(partition: Partition, leader_epoch: int, leader_end: int, *, deferred: bool = False) -> bool:
    """Cut the log where it diverges from the leader's; False when another round is needed. ``deferred``: the
    checkpoint is left for the caller to write (`Partition.take_epoch_write`)."""
    log_end = partition.log.log_end_offset
    if leader_end == UNDEFINED_OFFSET:
        partition.truncate_to(partition.log.high_watermark, deferred=deferred)
        return True
    local_epoch, local_end = partition.epoch_cache.end_offset_for(leader_epoch, log_end)
    if local_epoch != leader_epoch:  # KIP-279: we never had the leader's epoch; go one epoch back
        partition.truncate_to(min(local_end if local_end >= 0 else 0, log_end), deferred=deferred)
        return local_epoch == UNDEFINED_EPOCH
    partition.truncate_to(min(local_end, leader_end), deferred=deferred)
    return True
