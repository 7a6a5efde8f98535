"""One partition replica hosted by this broker: its log, its role, its leader epochs and, as leader,
what it knows about its followers (see `replica_state.py` for the ISR and high-watermark rules).

Concurrency notes: everything here runs on the event loop and is synchronous; the only
asynchronous step, writing a changed ISR to ZooKeeper, is driven by `ReplicaManager`, which keeps
the ISR being written in `pending_isr` meanwhile so two ISR writes never race. Until such a write
succeeds the committed ISR stays in force for acks=all (min.insync.replicas), while the high
watermark counts the maximal ISR, committed and pending members together (Kafka's
`maybeIncrementLeaderHW`): a follower joining the ISR must never be below the high watermark, or
once the write lands it could be elected without records the leader acknowledged.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Callable, Container

from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.topic import TopicPartition
from pybroker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from pybroker.log.errors import CorruptLogError, OffsetOutOfRangeError
from pybroker.log.log import PartitionLog
from pybroker.log.results import AppendInfo
from pybroker.records.batch import BatchHeader, iter_batches
from pybroker.replication import replica_state as rs
from pybroker.replication.epoch_cache import EpochCache
from pybroker.replication.epoch_writes import EpochFile, EpochWrite
from pybroker.replication.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    PolicyViolationError,
    UnknownLeaderEpochError,
)


log = logging.getLogger("pybroker.replication")

HIGH_WATERMARK = -1
"""A DeleteRecords offset meaning "up to the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK)."""


def epoch_checkpoint_of(partition_log: PartitionLog) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile(os.path.join(partition_log.dir, LEADER_EPOCH_CHECKPOINT))


def epoch_cache_of(partition_log: PartitionLog) -> EpochCache:
    """The log's epoch cache as its `leader-epoch-checkpoint` has it, cut to the log's offset range
    (start-up recovery may have dropped a torn tail; retention may have moved the start). When the
    file is missing or corrupt the cache is rebuilt from the batch headers, then written."""
    cache, stale = epoch_cache_on_disk(partition_log)
    if stale:
        epoch_checkpoint_of(partition_log).write(dict(cache.entries))
    return cache


def write_first_epoch(partition_log: PartitionLog, *, leader_epoch: int) -> None:
    """Write the `leader-epoch-checkpoint` a new log gets when this broker leads it at `leader_epoch`
    (what `Partition.make_leader` would write), on an I/O thread before the log is served: the role
    change on the loop then finds the epoch in place and writes nothing."""
    cache = epoch_cache_of(partition_log)
    if cache.assign(leader_epoch, partition_log.log_end_offset):
        epoch_checkpoint_of(partition_log).write(dict(cache.entries))


def latest_epoch_on_disk(partition_log: PartitionLog) -> int:
    """The leader epoch of the log's last batch, for a replica this broker does not serve yet (the
    controller compares logs before it elects one); reads, never writes, the checkpoint."""
    return epoch_cache_on_disk(partition_log)[0].latest_epoch


def epoch_cache_on_disk(partition_log: PartitionLog) -> tuple[EpochCache, bool]:
    """`epoch_cache_of` without its write: the cache and whether the checkpoint must be written again to match
    it, which nothing waits for (a file cut or rebuilt again at the next start-up if it lags, as Kafka's
    LogLoader flushes these in the background)."""
    checkpoint = epoch_checkpoint_of(partition_log)
    log_is_empty = partition_log.size_in_bytes == 0
    stored = _stored_epochs(checkpoint, log_is_empty=log_is_empty)
    if stored is None:
        cache = EpochCache.from_batches((h.partition_leader_epoch, h.base_offset)
                                        for segment in partition_log.segments for _, h in segment.iter_headers())
    else:
        cache = EpochCache.from_batches(sorted(stored.items()))
    changed = cache.truncate_from_end(partition_log.log_end_offset)
    changed |= cache.truncate_from_start(partition_log.log_start_offset)
    return cache, changed or (stored is None and not log_is_empty)  # a new log's file comes with its first epoch


def _stored_epochs(checkpoint: LeaderEpochCheckpointFile, *, log_is_empty: bool) -> dict[int, int] | None:
    """The checkpoint's entries; None when it is missing or corrupt (one WARN line, unless the log
    is new and so has nothing to rebuild from)."""
    if not os.path.exists(checkpoint.path):
        if not log_is_empty:
            log.warning("Missing %s; rebuilding the leader epoch cache from the log", checkpoint.path)
        return None
    try:
        return checkpoint.read()
    except CorruptLogError as exc:
        log.warning("%s; rebuilding the leader epoch cache from the log", exc)
        return None


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    broker_id: BrokerId
    leader_id: BrokerId
    leader_epoch: LeaderEpoch
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_insync_replicas: int = 1
    zk_version: int = 0
    controller_epoch: int = 0
    epoch_cache: EpochCache = field(default_factory=EpochCache)
    followers: dict[int, rs.FollowerState] = field(default_factory=dict)
    pending_isr: tuple[int, ...] | None = None
    epoch_file: EpochFile = field(default_factory=EpochFile)
    epochs_unwritten: bool = False
    """The epoch cache changed and its `leader-epoch-checkpoint` does not have it yet: a follower's truncation or
    log start move, left for its fetcher to write off the loop (`take_epoch_write`)."""
    write_later: Callable[[Partition, EpochWrite], None] | None = None
    """Where a write nothing waits for goes (only the log start moved, as Kafka's truncateFromStartAsyncFlush): the
    replica manager's background writes; None writes it at once (tests without a broker)."""
    key: TopicPartition = field(init=False)
    """(topic, index), built once: the append and watermark paths key their waiters by it."""

    def __post_init__(self) -> None:
        self.key = TopicPartition(self.topic, self.index)

    @property
    def isr_update_pending(self) -> bool:
        return self.pending_isr is not None

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus the members an in-flight write adds."""
        pending = self.pending_isr
        if not pending:  # no write in flight: every append asks
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    @property
    def minimal_isr(self) -> tuple[int, ...]:
        """The committed ISR, or the smaller one a write in flight sets. While a shrink below
        min.insync.replicas is in flight, acks=all appends are refused (Kafka takes them until the shrink
        lands): the leader flushed its whole log before sending that shrink so that, once it is the only
        member, a power loss cannot take what it acknowledged; an append after that flush, acknowledged
        when the lagging follower caught up just before the shrink landed, would be on no disk of an ISR
        member (a chaos round with overlapping faults lost 15 such records)."""
        pending = self.pending_isr
        return pending if pending is not None and len(pending) < len(self.isr) else self.isr

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def check_leader_epoch(self, requested_epoch: int) -> None:
        """Kafka's current-leader-epoch check: -1 skips it, older is fenced, newer is unknown."""
        if requested_epoch < 0 or requested_epoch == self.leader_epoch:
            return
        if requested_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{self.topic}-{self.index}: epoch {requested_epoch} < {self.leader_epoch}")
        raise UnknownLeaderEpochError(f"{self.topic}-{self.index}: epoch {requested_epoch} > {self.leader_epoch}")

    # Role changes

    def epochs_when_leading(self, leader_epoch: LeaderEpoch) -> dict[int, int] | None:
        """The `leader-epoch-checkpoint` entries `make_leader` at `leader_epoch` would write now, None
        when it would write nothing: the replica manager writes them off the loop first."""
        cache = EpochCache(list(self.epoch_cache.entries))
        changed = cache.assign(leader_epoch, self.log.log_end_offset) or self.epochs_unwritten
        changed |= cache.truncate_from_start(self.log.log_start_offset)
        return dict(cache.entries) if changed and not self.log.closed else None

    def epoch_write(self, entries: dict[int, int]) -> EpochWrite:
        """A write of ``entries`` to this replica's `leader-epoch-checkpoint`, ordered after those taken before."""
        return self.epoch_file.take(epoch_checkpoint_of(self.log), entries)

    def fence(self, leader_epoch: LeaderEpoch) -> None:
        """Serve nothing at the coming `leader_epoch` until `make_leader` (its checkpoint is being
        written): produce and fetch are answered NOT_LEADER_OR_FOLLOWER, the log stays as it is, and a
        LeaderAndIsr repeating the epoch is stale."""
        self.leader_id, self.leader_epoch = BrokerId(-1), leader_epoch
        self.followers = {}
        self.pending_isr = None

    def make_leader(self, *, leader_epoch: LeaderEpoch, replicas: tuple[int, ...], isr: tuple[int, ...],
                    zk_version: int, now_ms: int, written: dict[int, int] | None = None) -> None:
        """Lead at `leader_epoch`; `written`: the checkpoint entries already made durable for it
        (`epochs_when_leading`), which then is not written again unless the cache came out otherwise."""
        self.leader_id, self.leader_epoch = self.broker_id, leader_epoch
        self.replicas, self.isr, self.zk_version = replicas, isr, zk_version
        self.pending_isr = None
        self._persist_epochs(changed=self.epoch_cache.assign(leader_epoch, self.log.log_end_offset),
                             written=written)
        self.followers = {r: rs.initial_follower(r, in_isr=r in isr, now_ms=now_ms)
                          for r in replicas if r != self.broker_id}
        self.maybe_advance_high_watermark()

    def make_follower(self, *, leader_id: BrokerId, leader_epoch: LeaderEpoch, replicas: tuple[int, ...],
                      isr: tuple[int, ...], zk_version: int) -> None:
        self.leader_id, self.leader_epoch = leader_id, leader_epoch
        self.replicas, self.isr, self.zk_version = replicas, isr, zk_version
        self.followers = {}
        self.pending_isr = None

    # Leader side

    def append_as_leader(self, batch: bytearray, *, required_acks: int, now_ms: int,
                         transaction_version: int = 0, header: BatchHeader | None = None) -> AppendInfo:
        if not self.is_leader:
            raise NotLeaderError(f"Broker {self.broker_id} is not the leader of {self.topic}-{self.index}")
        if required_acks == -1 and len(self.minimal_isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {list(self.minimal_isr)} is insufficient to satisfy the min.isr "
                f"requirement of {self.min_insync_replicas} for partition {self.topic}-{self.index}")
        info = self.log.append_as_leader(batch, leader_epoch=self.leader_epoch, now_ms=now_ms,
                                         transaction_version=transaction_version, header=header)
        self._persist_epochs(changed=False)
        self.maybe_advance_high_watermark(-1 if info.duplicate else info.last_offset + 1)
        return info

    def check_follower(self, replica_id: int) -> None:
        """Kafka's followerReplicaOrThrow: only another replica of the partition fetches as a follower,
        so the follower table never holds more than the replica set."""
        if replica_id == self.broker_id or replica_id not in self.replicas:
            raise NotLeaderError(f"Replica {replica_id} is not recognized as a valid replica of "
                                 f"{self.topic}-{self.index}")

    def record_follower_fetch(self, replica_id: BrokerId, fetch_offset: int, now_ms: int, *,
                              log_start_offset: int = -1) -> bool:
        """Record a follower's fetch; True when the log start it reports changed (DeleteRecords waits on it)."""
        self.check_follower(replica_id)
        state = self.followers.get(replica_id) or rs.initial_follower(replica_id, in_isr=False, now_ms=now_ms)
        self.followers[replica_id] = rs.on_follower_fetch(state, fetch_offset=fetch_offset,
                                                          leader_leo=self.log.log_end_offset, now_ms=now_ms,
                                                          log_start_offset=log_start_offset)
        return state.log_start_offset != log_start_offset

    def delete_records(self, offset: int) -> int:
        """Move the leader's log start to ``offset`` (-1: the high watermark) and answer the offset
        asked for (Kafka's deleteRecordsOnLeader); the segments below go in the next retention pass."""
        if not self.is_leader:
            raise NotLeaderError(f"Leader not local for partition {self.topic}-{self.index} on broker {self.broker_id}")
        if not self.log.config.delete_enabled:
            raise PolicyViolationError(f"Records of partition {self.topic}-{self.index} can not be deleted due to "
                                       "the configured policy")
        target = self.log.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0:
            raise OffsetOutOfRangeError(target, self.log.log_start_offset, self.log.high_watermark)
        self.log.increment_log_start_offset(target)
        self._persist_epochs(changed=False)
        return target

    def low_watermark(self, alive: Container[int]) -> int:
        """The smallest log start among this leader and the replicas on live brokers (Kafka's
        lowWatermarkIfLeader): a DeleteRecords answer waits until it reaches the offset asked for."""
        if not self.is_leader:
            raise NotLeaderError(f"Leader not local for partition {self.topic}-{self.index} on broker {self.broker_id}")
        low = self.log.log_start_offset
        for replica, state in self.followers.items():
            if replica in self.replicas and replica in alive:
                low = min(low, state.log_start_offset)
        return low

    def maybe_advance_high_watermark(self, log_end_offset: int = -1) -> bool:
        """Apply the high-watermark rule; True when it moved. ``log_end_offset``: the log's, when the caller
        knows it (an append: one property read less per Produce)."""
        log = self.log
        before = log.high_watermark
        end = log.log_end_offset if log_end_offset < 0 else log_end_offset
        if end <= before:  # the rule's target is at most the leader's log end: nothing to move
            return False
        isr = self.maximal_isr
        if len(isr) == 1 and isr[0] == self.broker_id:  # the leader alone (every produce to an unreplicated topic)
            target = end
        else:
            target = rs.high_watermark(before, end, isr, self.broker_id, self.followers)
        return target > before and log.set_high_watermark(target) > before

    def isr_to_add(self, replica_id: BrokerId) -> tuple[int, ...]:
        """The follower that just fetched, if it may join: only its own fetch tells what it holds now (Kafka's
        maybeExpandIsr looks at the fetching replica alone). Another follower's state can be from before its
        broker restarted with less (chaos round 8302: a follower back from a power loss with an empty log was
        added to the ISR on the old offset when a third replica fetched, then elected, and 13 committed
        records were truncated away on every replica)."""
        state = self.followers.get(replica_id)
        if state is None or replica_id in self.isr or replica_id not in self.replicas:
            return ()
        start = self.epoch_cache.start_offset_of_latest()
        joins = rs.may_join_isr(state, high_watermark=self.log.high_watermark, epoch_start_offset=start)
        return (replica_id,) if joins else ()

    def isr_to_remove(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...]:
        return rs.out_of_sync(self.isr, self.broker_id, self.followers, now_ms=now_ms, max_lag_ms=max_lag_ms)

    # Follower side

    def epochs_before_append(self, records: bytes) -> dict[int, int] | None:
        """The `leader-epoch-checkpoint` entries `append_as_follower` of ``records`` must make durable before it
        appends them (and any change of the cache the file lacks still: nothing is appended while the file lags),
        None when there are none: the fetcher writes them off the loop first."""
        cache = EpochCache(list(self.epoch_cache.entries))
        new_epochs = _assign_fetched(cache, records, self.log.log_end_offset)
        if not (new_epochs or self.epochs_unwritten) or self.log.closed:
            return None
        cache.truncate_from_start(self.log.log_start_offset)
        return dict(cache.entries)

    def append_as_follower(self, records: bytes, *, leader_high_watermark: int, now_ms: int,
                           leader_log_start_offset: int = -1, written: dict[int, int] | None = None,
                           deferred: bool = False) -> None:
        """Append what the leader sent. ``written``: the checkpoint entries already made durable for the
        batches' new epochs (`epochs_before_append`). ``deferred``: a truncation of the cache (a failed append,
        a moved log start) is left to the caller to write (`take_epoch_write`) rather than written here."""
        if records:
            # The epochs go into the checkpoint before the batches into the log (as Kafka assigns
            # them first), so a crash in between cannot leave the log ahead of its checkpoint.
            new_epochs = _assign_fetched(self.epoch_cache, records, self.log.log_end_offset)
            if new_epochs or self.epochs_unwritten or not deferred:
                self._persist_epochs(changed=new_epochs, written=written)
            try:
                self.log.append_as_follower(records, now_ms=now_ms)
            except Exception:
                self._persist_epochs(changed=self.epoch_cache.truncate_from_end(self.log.log_end_offset),
                                     deferred=deferred)
                raise
        # Monotonic: a new leader may report a lower watermark than this replica already saw committed.
        target = min(leader_high_watermark, self.log.log_end_offset)
        if target > self.log.high_watermark:
            self.log.set_high_watermark(target)
        # The leader's log start (DeleteRecords, retention) becomes ours, as Kafka's follower does
        # (maybeIncrementLogStartOffset); never past what this replica knows is committed.
        if self.log.increment_log_start_offset(min(leader_log_start_offset, self.log.high_watermark)):
            self._persist_epochs(changed=False, deferred=deferred)

    def truncate_to(self, offset: int, *, deferred: bool = False) -> None:
        """Cut the log at ``offset``; ``deferred`` as in `append_as_follower`."""
        if self.log.truncate_to(offset):
            self._persist_epochs(changed=self.epoch_cache.truncate_from_end(self.log.log_end_offset),
                                 deferred=deferred)

    def truncate_fully_and_start_at(self, offset: int, *, deferred: bool = False) -> None:
        """Empty the log and restart it at ``offset``; ``deferred`` as in `append_as_follower`."""
        self.log.truncate_fully_and_start_at(offset)
        self._persist_epochs(changed=self.epoch_cache.clear(), deferred=deferred)

    # Leader epochs

    def mark_epochs_unwritten(self) -> None:
        """The file may hold other entries than the cache: a write for an append not made yet (a role change
        may void it), so whoever writes next writes the cache, unless the append comes with what was written."""
        self.epochs_unwritten = True

    def drop_epochs_below_log_start(self) -> None:
        """Retention moved the log start: the cache drops the epochs below it now (Kafka's
        maybeIncrementLogStartOffset), not at the next append; the file follows in the background, or with the
        next write when one is due already (`epochs_unwritten`)."""
        self._persist_epochs(changed=False, deferred=self.epochs_unwritten)

    def take_epoch_write(self) -> EpochWrite | None:
        """The write that brings `leader-epoch-checkpoint` up to the cache, None when it has it already."""
        if not self.epochs_unwritten or self.log.closed:
            return None
        self.epochs_unwritten = False
        return self.epoch_write(dict(self.epoch_cache.entries))

    def _persist_epochs(self, *, changed: bool, written: dict[int, int] | None = None, deferred: bool = False) -> None:
        """Write `leader-epoch-checkpoint` when the epoch cache `changed` or its start lags the log's:
        the log start moves without the partition knowing (retention, DeleteRecords), so every
        append, truncation and role change catches the cache up with it. Not when the file already
        holds what the cache now has (`written`); only marked `epochs_unwritten` when `deferred`; handed to
        `write_later` when only the start moved."""
        start = self.log.log_start_offset
        cached = self.epoch_cache.entries  # (EpochCache.truncate_from_start's own first test, read here: no call
        # on every append, where the log start has not moved past the first epoch)
        start_moved = bool(cached) and cached[0][1] < start and self.epoch_cache.truncate_from_start(start)
        if not (changed or start_moved or self.epochs_unwritten) or self.log.closed:
            return
        if deferred:
            self.epochs_unwritten = True
            return
        entries = dict(self.epoch_cache.entries)
        if written != entries:
            if self.write_later is not None and (not (changed or self.epochs_unwritten)
                                                 or self._lacks_only_dropped_epochs(written, entries)):
                self.write_later(self, self.epoch_write(entries))  # dropped epochs only: start-up cuts a lagging file
            else:
                self.epoch_file.write_now(epoch_checkpoint_of(self.log), entries)
        self.epochs_unwritten = False

    def _lacks_only_dropped_epochs(self, written: dict[int, int] | None, entries: dict[int, int]) -> bool:
        """Whether a file holding ``written`` differs from ``entries`` only by epochs below the log start (retention
        moved it while the file was written for a role change or an append)."""
        if written is None:
            return False
        cache = EpochCache.from_batches(sorted(written.items()))
        cache.truncate_from_start(self.log.log_start_offset)
        return dict(cache.entries) == entries


def _assign_fetched(cache: EpochCache, records: bytes, log_end_offset: int) -> bool:
    """Assign the epochs of the fetched batches past ``log_end_offset``; whether ``cache`` changed."""
    changed = False
    for batch in iter_batches(records):
        if batch.base_offset >= log_end_offset:
            changed |= cache.assign(batch.partition_leader_epoch, batch.base_offset)
    return changed
