"""The partitions this broker hosts: their roles, appends, reads, replication and the purgatories.

Two waiting rooms (Kafka's delayed-fetch and delayed-produce purgatories in miniature, driven by
`fetch_messages.py` and `append_records.py`):
- fetches that find too little data wait on `wait_for_append`; every append to a partition, and
  every high-watermark move, wakes them and they re-read;
- acks=all produces wait on `wait_for_high_watermark` until the ISR holds their last offset.

In a cluster, the controller's LeaderAndIsr drives `become_leader` / `become_follower` (those that wait for a
new log or a new leader epoch's checkpoint through `role_changes.py`); a follower's partitions are fetched by
one `ReplicaFetcher` per leader broker. ISR changes decided here are
sent through the `IsrWriter` seam (AlterPartition to the controller in production), one per partition at a time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from typing import Callable, Container, Iterable, Protocol

from pybroker.common.clock import Clock
from pybroker.common.io_executor import IoExecutor
from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.topic import TopicPartition, topic_id_to_string
from pybroker.log.config import LogConfig
from pybroker.log.errors import LogStorageError
from pybroker.log.log import PartitionLog
from pybroker.log.manager import RECOVERY_POINT_CHECKPOINT, LogManager
from pybroker.log.results import AppendInfo
from pybroker.records.batch import BatchHeader
from pybroker.records.errors import RecordTooLargeError
from pybroker.replication.append_queue import AppendQueue
from pybroker.replication.errors import (
    NotEnoughReplicasAfterAppendError,
    NotLeaderError,
    ReplicaTimeoutError,
    ReplicationError,
    UnknownPartitionError,
)
from pybroker.replication.epoch_cache import EpochCache
from pybroker.replication.epoch_writes import BackgroundEpochWrites, EpochWrite
from pybroker.replication.fetcher import EpochWriting, FetcherConfig, ReplicaFetcher
from pybroker.replication.leader_endpoint import LeaderEndPoint
from pybroker.replication.partition import Partition, epoch_cache_on_disk
from pybroker.replication.role_changes import PartitionRole, RoleChanges
from pybroker.replication.topic_changes import TopicChanges

log = logging.getLogger("pybroker.replication")


class IsrWriter(Protocol):
    async def __call__(self, topic: str, partition: int, *, leader: int, leader_epoch: int, isr: tuple[int, ...],
                       controller_epoch: int, zk_version: int) -> tuple[tuple[int, ...], int] | None:
        """Store the new ISR if the stored state still has `zk_version`; the ISR now stored and its
        version (an earlier write of this leader whose answer was lost may be stored instead), or None
        when the state changed meanwhile (the controller moved leadership: a LeaderAndIsr follows)."""


NO_LEADER = BrokerId(-1)

LeadershipListener = Callable[[str, int, int, bool], None]
"""``(topic, partition, leader_epoch, is_leader)``"""


class ReplicaManager:
    def __init__(self, log_manager: LogManager, broker_id: BrokerId, clock: Clock, *,
                 replica_lag_time_max_ms: int = 30000, io: IoExecutor | None = None):
        """``io``: where the fetchers write their replicas' `leader-epoch-checkpoint`, and the writes nothing waits
        for (`write_epochs_later`); None writes on the loop (tests without a broker)."""
        self.log_manager = log_manager
        self.io = io
        self._background_epochs = None if io is None else BackgroundEpochWrites(io)
        self._loaded_epochs: dict[TopicPartition, tuple[PartitionLog, EpochCache, bool]] = {}
        """Per log loaded at start-up: its epoch cache and whether its file is stale (`load_epoch_caches`)."""
        self.broker_id = broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.isr_writer: IsrWriter | None = None
        self.clock = clock
        self._now_ms = clock.wall_ms
        self._partitions: dict[TopicPartition, Partition] = {}
        self._by_topic: dict[str, dict[int, Partition]] = {}  # the same, per topic: a topic's change is O(its partitions)
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self.role_changes = RoleChanges(self)
        """The LeaderAndIsr role changes that wait for files: a new log, a new leader epoch (`role_changes.py`)."""
        self.topic_changes = TopicChanges()
        """Single node: the topic changes of the embedded metadata, applied in order (`topic_changes.py`)."""
        self.append_queue = AppendQueue()  # produce appends waiting behind a big batch checked off the loop
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._fetcher_addresses: dict[int, tuple[str, int]] = {}
        self._fetcher_config: FetcherConfig | None = None
        self._endpoint_factory: Callable[[int, str, int], LeaderEndPoint] | None = None
        self._isr_tasks: set[asyncio.Task[None]] = set()
        self.isr_shrinks = 0
        self.isr_expands = 0
        """ISR changes this broker made as a leader (Kafka's IsrShrinksPerSec / IsrExpandsPerSec)."""
        self.leadership_listeners: list[LeadershipListener] = []
        """Called on each change of this broker's leadership of a partition (the coordinators
        load and unload their internal-topic partitions, as Kafka's onElection/onResignation)."""
        log_manager.dir_failure_listeners.append(self._on_log_dir_failure)
        self.hosted_listeners: list[Callable[[str, int], None]] = []
        """Called with (topic, partition) when this broker starts serving a replica (the log dir mover
        resumes a move found at startup)."""

    def enable_fetching(self, config: FetcherConfig,
                        endpoint_factory: Callable[[int, str, int], LeaderEndPoint]) -> None:
        self._fetcher_config = config
        self._endpoint_factory = endpoint_factory

    def partition(self, topic: str, index: int) -> Partition:
        # Looked up per topic, then per index: every Produce and Fetch asks, and a TopicPartition key would be
        # built (in Python) for each lookup.
        of_topic = self._by_topic.get(topic)
        partition = None if of_topic is None else of_topic.get(index)
        if partition is None:
            raise self._not_hosted(topic, index)
        return partition

    def leader_partition(self, topic: str, index: int) -> Partition:
        of_topic = self._by_topic.get(topic)
        partition = None if of_topic is None else of_topic.get(index)
        if partition is None:
            raise self._not_hosted(topic, index)
        if not partition.is_leader:
            raise NotLeaderError(f"Broker {self.broker_id} is not the leader of {topic}-{index}")
        return partition

    def _not_hosted(self, topic: str, index: int) -> ReplicationError:
        if self.role_changes.creating(TopicPartition(topic, index)) or self.topic_changes.pending(topic):
            # Kafka's answer for a partition its metadata has but its replica manager does not host yet:
            # clients refresh their metadata and retry.
            return NotLeaderError(f"The replica of {topic}-{index} on broker {self.broker_id} is not ready yet")
        return UnknownPartitionError(f"This server does not host this topic-partition: {topic}-{index}")

    def hosted(self, topic: str, index: int) -> Partition | None:
        of_topic = self._by_topic.get(topic)
        return None if of_topic is None else of_topic.get(index)

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    # A LeaderAndIsr's topic id against the replica's log (ZooKeeper mode)

    def has_consistent_topic_id(self, topic: str, index: int, topic_id: uuid.UUID) -> bool:
        """Whether a LeaderAndIsr partition state may apply to the replica's log (Kafka's hasConsistentTopicId):
        False when the log (hosted, or on disk from before a restart) records another topic id, as a log left
        from a topic deleted and created again while this broker was away does. The caller answers
        INCONSISTENT_TOPIC_ID and the log stays as it is, unserved, for the operator to move aside, as Kafka's
        ZooKeeper-mode broker does (see log/stray_logs.py)."""
        partition = self._partitions.get(TopicPartition(topic, index))
        if partition is not None:
            recorded: uuid.UUID | None = partition.topic_id
        else:
            on_disk = self.log_manager.get_log(topic, index)
            recorded = None if on_disk is None else on_disk.topic_id
        if recorded is None or recorded.int == 0 or topic_id.int == 0 or recorded == topic_id:  # zero: no id
            return True
        log.error("[Broker id=%d] Topic ID in memory: %s does not match the topic ID for partition %s-%d received: %s.",
                  self.broker_id, topic_id_to_string(recorded), topic, index, topic_id_to_string(topic_id))
        return False

    # Roles

    def _hosted(self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig, min_isr: int,
                leader_epoch: LeaderEpoch) -> Partition:
        key = TopicPartition(topic, index)
        if self.log_manager.is_offline(topic, index):
            raise LogStorageError(f"The log dir of {topic}-{index} is offline")
        partition = self._partitions.get(key)
        if partition is None:
            log_ = self.log_manager.get_or_create_log(topic, index, config, topic_id)
            cache, stale = self._epoch_cache_for(key, log_)
            partition = Partition(topic, index, topic_id, log_, self.broker_id, NO_LEADER, leader_epoch, (), (),
                                  min_isr, epoch_cache=cache, write_later=self.write_epochs_later)
            if stale:
                self.write_epochs_later(partition, partition.epoch_write(dict(cache.entries)))
            self._partitions[key] = partition
            self._by_topic.setdefault(topic, {})[index] = partition
            for listener in self.hosted_listeners:
                listener(topic, index)
        else:
            partition.log.update_config(config)
            partition.min_insync_replicas = min_isr
        return partition

    def become_leader(self, topic: str, index: int, topic_id: uuid.UUID, *, leader_epoch: LeaderEpoch,
                      replicas: tuple[int, ...], isr: tuple[int, ...], config: LogConfig,
                      min_insync_replicas: int, zk_version: int = 0, controller_epoch: int = 0) -> Partition:
        partition = self._hosted(topic, index, topic_id, config, min_insync_replicas, leader_epoch)
        self.lead(partition, leader_epoch=leader_epoch, replicas=replicas, isr=isr, zk_version=zk_version,
                  controller_epoch=controller_epoch, was_leader=partition.is_leader)
        return partition

    def lead(self, partition: Partition, *, leader_epoch: LeaderEpoch, replicas: tuple[int, ...],
             isr: tuple[int, ...], zk_version: int, controller_epoch: int, was_leader: bool,
             written: dict[int, int] | None = None) -> None:
        """Make a hosted replica the leader at ``leader_epoch``; ``written`` as in `Partition.make_leader`."""
        self._stop_fetching(partition.key)
        partition.controller_epoch = controller_epoch
        partition.make_leader(leader_epoch=leader_epoch, replicas=replicas, isr=isr, zk_version=zk_version,
                              now_ms=self._now_ms(), written=written)
        self._wake(partition.key)
        if not was_leader:
            self.notify_leadership(partition.topic, partition.index, leader_epoch, is_leader=True)
        if len(isr) < partition.min_insync_replicas:  # the controller shrank it (its followers died): at once
            self._spawn(self._make_durable_logging_failure(partition))

    def become_follower(self, role: PartitionRole, leader_address: tuple[str, int] | None, *, config: LogConfig,
                        min_insync_replicas: int) -> Partition:
        key = TopicPartition(role.topic, role.index)
        self.check_can_follow(role, leader_address)
        partition = self._hosted(role.topic, role.index, role.topic_id, config, min_insync_replicas,
                                 role.leader_epoch)
        was_leader = partition.is_leader
        self._stop_fetching(key)
        partition.controller_epoch = role.controller_epoch
        partition.make_follower(leader_id=role.leader, leader_epoch=role.leader_epoch, replicas=role.replicas,
                                isr=role.isr, zk_version=role.zk_version)
        self._wake(key)
        if was_leader:
            self.notify_leadership(role.topic, role.index, role.leader_epoch, is_leader=False)
        if leader_address is not None and role.leader >= 0:
            self._fetcher_for(role.leader, leader_address).add(key, role.leader_epoch)
        return partition

    def fence(self, role: PartitionRole, *, config: LogConfig, min_insync_replicas: int) -> Partition:
        """Serve nothing of the replica at ``role``'s new epoch until `lead` (`Partition.fence`): it stops
        fetching, and fetches waiting on it answer NOT_LEADER_OR_FOLLOWER now."""
        partition = self._hosted(role.topic, role.index, role.topic_id, config, min_insync_replicas,
                                 role.leader_epoch)
        self._stop_fetching(partition.key)
        partition.fence(role.leader_epoch)
        self._wake(partition.key)
        return partition

    def check_can_follow(self, role: PartitionRole, leader_address: tuple[str, int] | None) -> None:
        if leader_address is not None and role.leader >= 0 and self._fetcher_config is None:
            # Refused before anything changes: a partition left at this leader epoch would make the
            # controller's retry of the same epoch look stale, and no fetching would ever start.
            raise RuntimeError("replica fetching is not enabled on this broker")

    def apply_role(self, role: PartitionRole, leader_address: tuple[str, int] | None, *, config: LogConfig,
                   min_insync_replicas: int) -> None:
        """A LeaderAndIsr partition state; stale epochs were filtered by the caller."""
        log.info("%s-%d: %s at leader epoch %d, ISR %s", role.topic, role.index,
                 "leader" if role.leader == self.broker_id else f"follower of {role.leader}", role.leader_epoch,
                 list(role.isr))
        if role.leader == self.broker_id:
            self.become_leader(role.topic, role.index, role.topic_id, leader_epoch=role.leader_epoch,
                               replicas=role.replicas, isr=role.isr, config=config,
                               min_insync_replicas=min_insync_replicas, zk_version=role.zk_version,
                               controller_epoch=role.controller_epoch)
        else:
            self.become_follower(role, leader_address, config=config, min_insync_replicas=min_insync_replicas)

    def _fetcher_for(self, leader_id: int, address: tuple[str, int]) -> ReplicaFetcher:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is not None and self._fetcher_addresses.get(leader_id) != address:
            self._close_fetcher(leader_id)
            fetcher = None
        if fetcher is None:
            if self._fetcher_config is None or self._endpoint_factory is None:
                raise RuntimeError("replica fetching is not enabled on this broker")
            fetcher = ReplicaFetcher(leader_id, self._endpoint_factory(leader_id, *address), self._fetcher_config,
                                     self._partitions.get, self._on_follower_append, self.clock,
                                     EpochWriting(self.io, self._on_epoch_write_failed))
            self._fetchers[leader_id] = fetcher
            self._fetcher_addresses[leader_id] = address
        return fetcher

    def _stop_fetching(self, key: TopicPartition) -> None:
        for leader_id, fetcher in list(self._fetchers.items()):
            fetcher.remove(key)
            if fetcher.empty:
                self._close_fetcher(leader_id)

    def _close_fetcher(self, leader_id: int) -> None:
        fetcher = self._fetchers.pop(leader_id, None)
        self._fetcher_addresses.pop(leader_id, None)
        if fetcher is not None:
            self._spawn(fetcher.close())

    def _on_follower_append(self, key: TopicPartition) -> None:
        self._wake(key)

    def _on_epoch_write_failed(self, partition: Partition, written_log: PartitionLog, error: OSError) -> None:
        """A follower's or background `leader-epoch-checkpoint` write failed: its log dir fails, as the leader's does;
        not when the log is gone meanwhile (stopped, or replaced by a log dir move)."""
        if self._partitions.get(partition.key) is partition and partition.log is written_log and not written_log.closed:
            self.log_manager.fail_dir_of(written_log, LogStorageError(
                f"Writing the leader epoch checkpoint of {partition.topic}-{partition.index} failed: {error}"))

    def load_epoch_caches(self) -> None:
        """At start-up, before any replica is served: every loaded log's epoch cache from its checkpoint, or from
        the headers of every batch when it is missing or corrupt (a read of the whole log), as Kafka's LogLoader
        builds it while it loads the log; the first LeaderAndIsr hosting the replicas then reads nothing."""
        for log_ in self.log_manager.all_logs():
            cache, stale = epoch_cache_on_disk(log_)
            self._loaded_epochs[TopicPartition(log_.topic, log_.partition)] = log_, cache, stale

    def _epoch_cache_for(self, key: TopicPartition, log_: PartitionLog) -> tuple[EpochCache, bool]:
        """The log's epoch cache as loaded at start-up (cut to a log start retention moved since), else read now;
        and whether its file is stale."""
        loaded = self._loaded_epochs.pop(key, None)
        if loaded is None or loaded[0] is not log_:
            return epoch_cache_on_disk(log_)
        _, cache, stale = loaded
        return cache, cache.truncate_from_start(log_.log_start_offset) or stale

    def write_epochs_later(self, partition: Partition, write: EpochWrite) -> None:
        """Make a `leader-epoch-checkpoint` write nothing waits for in the background (`BackgroundEpochWrites`);
        its failure fails the log dir of the log it was taken for, if that log is still the replica's."""
        if self._background_epochs is None:
            write.run()
            return
        self._background_epochs.add(write, functools.partial(self._on_epoch_write_failed, partition, partition.log))

    def drop_epochs_below_log_starts(self) -> None:
        """After a retention pass that deleted segments: every replica's epoch cache drops what its log no
        longer has (`Partition.drop_epochs_below_log_start`)."""
        for partition in self._partitions.values():
            partition.drop_epochs_below_log_start()

    async def epochs_written(self) -> None:
        """Return once the background `leader-epoch-checkpoint` writes queued so far are made or failed."""
        if self._background_epochs is not None:
            await self._background_epochs.drained()

    def stop_replica(self, topic: str, index: int, *, delete: bool, source: str) -> bool:
        """Stop replicating a partition; whether its log is to be deleted, which the caller does with
        `LogManager.delete_logs`, a request's logs together. A deletion is logged at WARN with ``source``, what asked for it."""
        key = TopicPartition(topic, index)
        if delete:
            self._loaded_epochs.pop(key, None)
        self.role_changes.stopped(key, delete=delete, source=source)
        self._stop_fetching(key)
        partition = self._partitions.pop(key, None)
        if partition is not None:
            of_topic = self._by_topic[topic]
            del of_topic[index]
            if not of_topic:
                del self._by_topic[topic]
        if partition is not None and (self.role_changes.unfence(key) or partition.is_leader):
            self.notify_leadership(topic, index, partition.leader_epoch, is_leader=False)
        self._wake(key)
        if partition is not None and delete:
            log.warning("Deleting the log of %s-%d (leader epoch %d): %s", topic, index, partition.leader_epoch,
                        source)
            return True
        if delete and self.log_manager.get_log(topic, index) is not None:  # on disk, not hosted since the start
            log.warning("Deleting the log of %s-%d (not hosted): %s", topic, index, source)
            return True
        return False

    def _on_log_dir_failure(self, root: str, keys: list[TopicPartition]) -> None:
        """Kafka's handleLogDirFailure: the partitions of a failed log dir stop fetching, their waiting
        requests wake up (to answer KAFKA_STORAGE_ERROR) and the coordinators give up those they led."""
        for key in keys:
            self._stop_fetching(key)
            partition = self._partitions.get(key)
            if partition is not None and (self.role_changes.unfence(key) or partition.is_leader):
                self.notify_leadership(key[0], key[1], partition.leader_epoch, is_leader=False)
            self._wake(key)
        log.warning("Partitions %s are offline: their log dir %s failed",
                    ", ".join(f"{t}-{i}" for t, i in keys) or "(none)", root)

    def notify_leadership(self, topic: str, index: int, leader_epoch: int, *, is_leader: bool) -> None:
        for listener in self.leadership_listeners:
            try:
                listener(topic, index, leader_epoch, is_leader)
            except Exception:
                log.exception("Leadership listener failed for %s-%d", topic, index)

    def update_config(self, topic: str, config: LogConfig, min_insync_replicas: int) -> None:
        for partition in self._by_topic.get(topic, {}).values():
            partition.log.update_config(config)
            partition.min_insync_replicas = min_insync_replicas

    def remove_topic(self, topic: str) -> None:
        """Single node: the topic was deleted, and its logs with it (`LogManager.delete_logs`)."""
        being_created = self.role_changes.being_created(topic)
        source = f"topic {topic} was deleted"
        self.log_manager.delete_logs([TopicPartition(topic, index)
                                      for index in [*self._by_topic.get(topic, ()), *being_created]
                                      if self.stop_replica(topic, index, delete=True, source=source)])

    async def shutdown(self) -> None:
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._fetcher_addresses.clear()
        await asyncio.gather(*(fetcher.close() for fetcher in fetchers), return_exceptions=True)
        await self.epochs_written()
        tasks = list(self._isr_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # Leader side

    def append(self, topic: str, index: int, batch: bytearray, *, required_acks: int, now_ms: int,
               transaction_version: int = 0) -> AppendInfo:
        """The broker's own leader appends (coordinator records, transaction markers; ``transaction_version`` is a
        marker's, WriteTxnMarkers v2), refused past the partition's max.message.bytes as Kafka refuses every leader
        append; a produce is checked once, before its record walk, in `append_records`, and a follower's copy is
        never refused for its size."""
        partition = self.leader_partition(topic, index)
        limit = partition.log.config.max_message_bytes
        if len(batch) > limit:
            raise RecordTooLargeError(f"batch of {len(batch)} bytes exceeds max.message.bytes {limit}")
        return self.append_to(partition, batch, required_acks=required_acks, now_ms=now_ms,
                              transaction_version=transaction_version)

    def append_to(self, partition: Partition, batch: bytearray, *, required_acks: int, now_ms: int,
                  transaction_version: int = 0, header: BatchHeader | None = None) -> AppendInfo:
        """`append` to a partition the caller already looked up with `leader_partition` (``header``: the batch's,
        when the caller has unpacked it)."""
        info = partition.append_as_leader(batch, required_acks=required_acks, now_ms=now_ms,
                                          transaction_version=transaction_version, header=header)
        if not info.duplicate and self._waiters:  # usually no fetch waits: no call
            self._wake(partition.key)
        return info

    def log(self, topic: str, index: int) -> PartitionLog:
        return self.leader_partition(topic, index).log

    def record_follower_fetch(self, topic: str, index: int, replica_id: BrokerId, fetch_offset: int, *,
                              current_leader_epoch: LeaderEpoch, log_start_offset: int = -1) -> None:
        """A follower asked for `fetch_offset`: it holds everything before it, from `log_start_offset`."""
        partition = self.leader_partition(topic, index)
        partition.check_leader_epoch(current_leader_epoch)
        start_moved = partition.record_follower_fetch(replica_id, fetch_offset, self._now_ms(),
                                                      log_start_offset=log_start_offset)
        if partition.maybe_advance_high_watermark() or start_moved:
            self._wake(partition.key)
        joining = partition.isr_to_add(replica_id)
        if joining and not partition.isr_update_pending:
            self._change_isr(partition, partition.isr + joining)

    def shrink_isrs(self) -> None:
        """Drop followers that lagged longer than replica.lag.time.max.ms (run periodically)."""
        now = self._now_ms()
        for partition in self._partitions.values():
            if not partition.is_leader or partition.isr_update_pending:
                continue
            lagging = partition.isr_to_remove(now, self.replica_lag_time_max_ms)
            if lagging:
                log.info("Shrinking ISR of %s-%d from %s: %s lagged more than %d ms", partition.topic,
                         partition.index, list(partition.isr), list(lagging), self.replica_lag_time_max_ms)
                self._change_isr(partition, tuple(r for r in partition.isr if r not in lagging))

    def _change_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        if self.isr_writer is None:
            return
        partition.pending_isr = isr
        self._spawn(self._write_isr(partition, isr, partition.leader_epoch, partition.zk_version))

    async def _write_isr(self, partition: Partition, isr: tuple[int, ...], epoch: int, version: int) -> None:
        """One ISR write, at the leader epoch and version ``isr`` was decided at (not those of when the task starts:
        a LeaderAndIsr applied in between would make it a second write at the new epoch, alongside the one its
        leader decides); any failure is logged and ends it (the next fetch or shrink check tries again, and the
        writer recognises a write of ours that landed although its answer was lost)."""
        assert self.isr_writer is not None
        try:
            if len(isr) < len(partition.isr) and len(isr) < partition.min_insync_replicas:
                await self._make_acknowledged_durable(partition)
            written = await self.isr_writer(partition.topic, partition.index, leader=self.broker_id,
                                            leader_epoch=epoch, isr=isr,
                                            controller_epoch=partition.controller_epoch, zk_version=version)
        except Exception:
            log.exception("Writing ISR %s of %s-%d failed", list(isr), partition.topic, partition.index)
            written = None
        finally:
            if partition.leader_epoch == epoch:
                partition.pending_isr = None
        if written is None or not partition.is_leader or partition.leader_epoch != epoch:
            return
        stored, new_version = written
        log.info("ISR of %s-%d is now %s", partition.topic, partition.index, list(stored))
        if len(stored) < len(partition.isr):
            self.isr_shrinks += 1
        elif len(stored) > len(partition.isr):
            self.isr_expands += 1
        partition.isr, partition.zk_version = stored, new_version
        partition.maybe_advance_high_watermark()
        self._wake(partition.key)

    async def _make_acknowledged_durable(self, partition: Partition) -> None:
        """Before the ISR shrinks below min.insync.replicas this leader may become the only replica still
        counted in sync, while everything acks=all acknowledged is on its disk unsynced: flush its whole
        log and its recovery point, so a power loss of this broker cannot take it (chaos round 6016: the
        sole ISR member lost power, came back with an empty log, was elected and the other replicas
        truncated 56 acknowledged records). The whole log, not up to the high watermark: a new leader's
        high watermark lags what the previous leader acknowledged until its followers fetch again (round
        8015 flushed up to such a watermark and lost 2 acknowledged records above it). Not a Kafka rule
        (Kafka leaves fsync to the flush settings); it costs a flush only when a partition falls below
        its minimum ISR."""
        await self.log_manager.flush_log(partition.log)
        await self.log_manager.checkpoint_async((RECOVERY_POINT_CHECKPOINT,))

    async def _make_durable_logging_failure(self, partition: Partition) -> None:
        try:
            await self._make_acknowledged_durable(partition)
        except Exception:
            log.exception("Flushing the acknowledged records of %s-%d failed", partition.topic, partition.index)

    def _spawn(self, work) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(work)
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    # Waiting

    async def wait_for_high_watermark(self, topic: str, index: int, offset: int, timeout_s: float) -> None:
        """acks=all: return once the high watermark reaches `offset` with at least min.insync.replicas
        in the ISR. Raises NotLeaderError, NotEnoughReplicasAfterAppendError or ReplicaTimeoutError."""
        deadline = self.clock.monotonic() + timeout_s
        while not self.replicated(topic, index, offset):
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                raise ReplicaTimeoutError(f"Replication of {topic}-{index} up to offset {offset} timed out")
            await self.wait_for_append([TopicPartition(topic, index)], remaining)

    def replicated(self, topic: str, index: int, offset: int) -> bool:
        """Whether the high watermark has reached `offset` (an acks=all answer needs no wait). Raises
        NotLeaderError, or NotEnoughReplicasAfterAppendError when it has but the ISR is below min.insync.replicas."""
        of_topic = self._by_topic.get(topic)  # leader_partition, inline: every acks=all Produce asks
        partition = None if of_topic is None else of_topic.get(index)
        if partition is None or not partition.is_leader:
            partition = self.leader_partition(topic, index)  # raises
        if partition.log.high_watermark < offset:
            return False
        if len(partition.isr) < partition.min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"The size of the current ISR {list(partition.isr)} is insufficient to satisfy the min.isr "
                f"requirement of {partition.min_insync_replicas} for partition {topic}-{index}")
        return True

    async def wait_for_low_watermark(self, topic: str, index: int, offset: int, timeout_s: float,
                                     alive: Callable[[], Container[int]]) -> int:
        """DeleteRecords: the partition's low watermark once every replica on a live broker has its
        log start at `offset` (Kafka's DelayedDeleteRecords). Raises NotLeaderError or ReplicaTimeoutError."""
        deadline = self.clock.monotonic() + timeout_s
        while True:
            low = self.leader_partition(topic, index).low_watermark(alive())
            if low >= offset:
                return low
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                raise ReplicaTimeoutError(f"Deleting the records of {topic}-{index} before offset {offset} timed out")
            await self.wait_for_append([TopicPartition(topic, index)], remaining)

    async def wait_for_append(self, keys: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return after the first append (or watermark or role change) on any of `keys`, or after `timeout_s`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        registered = list(keys)
        for key in registered:
            self._waiters.setdefault(key, set()).add(future)
        try:
            await self.clock.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for key in registered:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[key]

    def records_acquirable(self, key: TopicPartition) -> None:
        """A share-partition on ``key`` made records acquirable again (their release was written): the share
        fetches waiting there acquire them now, as Kafka completes its delayed share fetches. A plain fetch it wakes
        reads once more and waits on."""
        self._wake(key)

    def _wake(self, key: TopicPartition) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(None)
