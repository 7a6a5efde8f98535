"""When a LeaderAndIsr's role changes that wait for files take effect (the role-change side of Kafka's
ReplicaManager, becomeLeaderOrFollower, apart from its data path): the replica manager applies each role
(`ReplicaManager.apply_role`), this module orders those that cannot be applied at once.

- A new replica's log is made off the event loop first (`LogManager.create_log`, with a leader's first
  `leader-epoch-checkpoint`), in a task of its own that a cancelled request does not stop half-way; until it
  is served, produce and fetch are answered NOT_LEADER_OR_FOLLOWER, and a StopReplica meanwhile wins.
- An existing replica to lead at an epoch its checkpoint lacks is fenced (`Partition.fence`) until the
  request's checkpoint writes are durable (`epoch_writes.py`), as Kafka's makeLeader runs after the epoch is
  flushed.
- One replica's role changes apply in the order they came: one arriving while another waits waits after it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Coroutine, Protocol, TypeVar

from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.topic import TopicPartition
from pybroker.common.uncancellable import run_to_end
from pybroker.log.config import LogConfig
from pybroker.log.errors import LogStorageError
from pybroker.log.log import PartitionLog
from pybroker.log.manager import LogManager
from pybroker.replication.epoch_writes import EpochWrites
from pybroker.replication.errors import NotLeaderError
from pybroker.replication.partition import Partition, write_first_epoch

__all__ = ["PartitionRole", "Replicas", "RoleChanges"]

log = logging.getLogger("pybroker.replication")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PartitionRole:
    """What the controller says about one partition (a LeaderAndIsr partition state)."""

    topic: str
    index: int
    topic_id: uuid.UUID
    leader: BrokerId
    leader_epoch: LeaderEpoch
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    zk_version: int
    controller_epoch: int


class Replicas(Protocol):
    """What the role changes need of the replica manager, which applies the roles."""

    broker_id: BrokerId
    log_manager: LogManager

    def hosted(self, topic: str, index: int) -> Partition | None: ...

    def apply_role(self, role: PartitionRole, leader_address: tuple[str, int] | None, *, config: LogConfig,
                   min_insync_replicas: int) -> None: ...

    def become_leader(self, topic: str, index: int, topic_id: uuid.UUID, *, leader_epoch: LeaderEpoch,
                      replicas: tuple[int, ...], isr: tuple[int, ...], config: LogConfig,
                      min_insync_replicas: int, zk_version: int = 0, controller_epoch: int = 0) -> Partition: ...

    def check_can_follow(self, role: PartitionRole, leader_address: tuple[str, int] | None) -> None: ...

    def fence(self, role: PartitionRole, *, config: LogConfig, min_insync_replicas: int) -> Partition: ...

    def lead(self, partition: Partition, *, leader_epoch: LeaderEpoch, replicas: tuple[int, ...],
             isr: tuple[int, ...], zk_version: int, controller_epoch: int, was_leader: bool,
             written: dict[int, int] | None = None) -> None: ...

    def notify_leadership(self, topic: str, index: int, leader_epoch: int, *, is_leader: bool) -> None: ...


@dataclass(slots=True)
class _Creation:
    """A replica whose new log is being made off the loop, and what a StopReplica meanwhile asked."""

    done: asyncio.Future[None]
    stopped_by: str | None = None
    delete: bool = False


class RoleChanges:
    def __init__(self, replicas: Replicas) -> None:
        self._replicas = replicas
        self._creating: dict[TopicPartition, _Creation] = {}
        self._pending: dict[TopicPartition, asyncio.Future[None]] = {}  # per replica, the last one still running
        self._fenced_leaders: set[TopicPartition] = set()  # led before their new epoch's checkpoint began

    # What the replica manager asks

    def creating(self, key: TopicPartition) -> bool:
        """Whether the replica's new log is being made (it is not served yet)."""
        return key in self._creating

    def being_created(self, topic: str) -> list[int]:
        return [key.partition for key in self._creating if key.topic == topic]

    def stopped(self, key: TopicPartition, *, delete: bool, source: str) -> None:
        """A StopReplica for the replica: a creation in progress sees it when the files are made."""
        creation = self._creating.get(key)
        if creation is not None:
            creation.stopped_by, creation.delete = source, creation.delete or delete

    def unfence(self, key: TopicPartition) -> bool:
        """Forget that the replica led before it was fenced; whether it did (its listeners are told it no
        longer leads by whoever stops or fails it)."""
        if key not in self._fenced_leaders:
            return False
        self._fenced_leaders.discard(key)
        return True

    # New logs

    def must_create_log(self, topic: str, index: int) -> bool:
        """Whether serving the partition needs a new log first (the `*_async` role changes make it off the loop)."""
        logs = self._replicas.log_manager
        return (self._replicas.hosted(topic, index) is None and logs.get_log(topic, index) is None
                and not logs.is_offline(topic, index))

    def become_leader_async(self, topic: str, index: int, topic_id: uuid.UUID, *, leader_epoch: LeaderEpoch,
                            replicas: tuple[int, ...], isr: tuple[int, ...], config: LogConfig,
                            min_insync_replicas: int) -> Awaitable[Partition]:
        """`become_leader`, a new log made off the event loop first (`_create_log`), in a task of its own
        (`_whole`)."""
        async def create_and_lead() -> Partition:
            await self._create_log(topic, index, topic_id, config, leader_epoch)
            return self._replicas.become_leader(topic, index, topic_id, leader_epoch=leader_epoch, replicas=replicas,
                                                isr=isr, config=config, min_insync_replicas=min_insync_replicas)
        return self._whole(create_and_lead())

    def apply_role_async(self, role: PartitionRole, leader_address: tuple[str, int] | None, *,
                         config: LogConfig, min_insync_replicas: int) -> Awaitable[None]:
        """`apply_role`, a new log made off the event loop first (`_create_log`): the LeaderAndIsr answer
        still comes after the replica's files are durable. In a task of its own (`_whole`)."""
        leads = role.leader == self._replicas.broker_id
        if not leads:
            self._replicas.check_can_follow(role, leader_address)

        async def create_and_apply() -> None:
            await self._create_log(role.topic, role.index, role.topic_id, config, role.leader_epoch if leads else None)
            self._replicas.apply_role(role, leader_address, config=config, min_insync_replicas=min_insync_replicas)
        return self._whole(create_and_apply())

    def _whole(self, change: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """A role change that makes a new log, run to its end (`run_to_end`) even when its request is cancelled (the
        controller's connection closed), so the log is never made with the replica not served (a request's epoch
        writes are shielded the same way); its outcome is then nobody's to answer."""
        return run_to_end(change)

    async def _create_log(self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig,
                          leader_epoch: LeaderEpoch | None) -> None:
        """Make a replica's new log with its files durable on the I/O executor (`LogManager.create_log`):
        as a leader, its first `leader-epoch-checkpoint` too, so that the role change that follows on the
        loop writes nothing. Until then a produce or fetch for it is answered NOT_LEADER_OR_FOLLOWER.
        A StopReplica meanwhile wins: the new log is deleted if it asked so, and the role is refused."""
        key = TopicPartition(topic, index)
        while (earlier := self._creating.get(key)) is not None:  # a repeated LeaderAndIsr: the first one makes it
            await asyncio.wait((earlier.done,))
        if not self.must_create_log(topic, index):
            return
        creation = _Creation(asyncio.get_running_loop().create_future())
        self._creating[key] = creation
        logs = self._replicas.log_manager
        try:
            prepare = None if leader_epoch is None else functools.partial(write_first_epoch, leader_epoch=leader_epoch)
            await logs.create_log(topic, index, config, topic_id, prepare=prepare)
        finally:
            del self._creating[key]
            creation.done.set_result(None)
        if creation.stopped_by is not None:
            if creation.delete:
                log.warning("Deleting the new log of %s-%d: %s", topic, index, creation.stopped_by)
                logs.delete_log(topic, index)
            raise NotLeaderError(f"{topic}-{index} was stopped while its log was created: {creation.stopped_by}")

    # New leader epochs

    def must_apply_later(self, role: PartitionRole) -> bool:
        """Whether an existing replica's role goes through `apply_role_later`: it is to lead at an epoch its
        `leader-epoch-checkpoint` lacks, or an earlier such change of it is still being applied."""
        if TopicPartition(role.topic, role.index) in self._pending:
            return True
        partition = self._replicas.hosted(role.topic, role.index)
        return (partition is not None and role.leader == self._replicas.broker_id
                and partition.epochs_when_leading(role.leader_epoch) is not None)

    def apply_role_later(self, role: PartitionRole, leader_address: tuple[str, int] | None, *, config: LogConfig,
                         min_insync_replicas: int, writes: EpochWrites) -> Awaitable[None]:
        """`apply_role` whose new epoch's checkpoint is queued on ``writes`` (the caller writes a request's
        together, off the loop) and that leads once it is durable, as Kafka's makeLeader runs after the
        epoch is flushed; meanwhile the replica is fenced (`Partition.fence`). The replica's role changes
        apply in the order they came: one arriving while another is pending waits for it."""
        key = TopicPartition(role.topic, role.index)
        earlier = self._pending.get(key)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending[key] = done
        try:
            step = None if earlier is not None else self._begin_role(role, leader_address, config,
                                                                    min_insync_replicas, writes)
        except BaseException:
            self._role_change_ended(key, done)
            raise
        return self._finish_role(key, done, earlier, step, role, leader_address, config, min_insync_replicas, writes)

    async def _finish_role(self, key: TopicPartition, done: asyncio.Future[None],
                           earlier: asyncio.Future[None] | None, step: Awaitable[None] | None, role: PartitionRole,
                           leader_address: tuple[str, int] | None, config: LogConfig, min_isr: int,
                           writes: EpochWrites) -> None:
        try:
            if earlier is not None:
                await asyncio.wait((earlier,))  # its failure was answered to its own request
                alone = EpochWrites(writes.io)
                step = self._begin_role(role, leader_address, config, min_isr, alone)
                await alone.write()
            if step is not None:
                await step
        finally:
            self._role_change_ended(key, done)

    def _role_change_ended(self, key: TopicPartition, done: asyncio.Future[None]) -> None:
        done.set_result(None)
        if self._pending.get(key) is done:
            del self._pending[key]

    def _begin_role(self, role: PartitionRole, leader_address: tuple[str, int] | None, config: LogConfig,
                    min_isr: int, writes: EpochWrites) -> Awaitable[None] | None:
        """Apply ``role`` at once if it writes no checkpoint, else fence the replica, queue its write and
        return what leads once the write is durable."""
        replicas = self._replicas
        partition = replicas.hosted(role.topic, role.index)
        entries = None
        if partition is not None and role.leader == replicas.broker_id and \
                not replicas.log_manager.is_offline(role.topic, role.index):
            entries = partition.epochs_when_leading(role.leader_epoch)
        if partition is None or entries is None:
            replicas.apply_role(role, leader_address, config=config, min_insync_replicas=min_isr)
            return None
        log.info("%s-%d: leader at epoch %d once its leader-epoch-checkpoint is written, ISR %s", role.topic,
                 role.index, role.leader_epoch, list(role.isr))
        was_leader = partition.is_leader
        replicas.fence(role, config=config, min_insync_replicas=min_isr)
        if was_leader:
            self._fenced_leaders.add(partition.key)
        written = writes.add(partition.epoch_write(entries))
        partition.mark_epochs_unwritten()  # the file is ahead of the cache: no write from the cache may follow it
        return self._lead_when_written(partition, role, entries, written, partition.log)

    async def _lead_when_written(self, partition: Partition, role: PartitionRole, entries: dict[int, int],
                                 written: asyncio.Future[None], written_log: PartitionLog) -> None:
        await asyncio.wait((written,))
        replicas = self._replicas
        name = f"{role.topic}-{role.index}"
        was_leader = self.unfence(partition.key)  # a StopReplica or a failed log dir meanwhile told the listeners
        stopped = replicas.hosted(role.topic, role.index) is not partition or partition.log.closed \
            or written.cancelled()
        moved = partition.log is not written_log  # a log dir move swapped the log: the file written is not its
        offline = not stopped and replicas.log_manager.is_offline(role.topic, role.index)
        outcome = None if written.cancelled() else written.exception()
        failure = None if stopped or moved else outcome
        if stopped or offline or failure is not None:
            if was_leader:
                replicas.notify_leadership(role.topic, role.index, role.leader_epoch, is_leader=False)
            if stopped:
                raise NotLeaderError(f"{name} was stopped while its leader epoch was written")
            error = LogStorageError(f"Writing the leader epoch checkpoint of {name} failed: "
                                    f"{failure or 'its log dir is offline'}")
            if not offline:
                replicas.log_manager.fail_dir_of(partition.log, error)
            raise error
        replicas.lead(partition, leader_epoch=role.leader_epoch, replicas=role.replicas, isr=role.isr,
                      zk_version=role.zk_version, controller_epoch=role.controller_epoch, was_leader=was_leader,
                      written=None if moved else entries)
