"""The broker's share groups (KIP-932): the coordinator side (membership, group configs) and the partition side
(each share-partition's in-flight state, share sessions), assembled for the handlers.

A share-partition is durable through the share coordinator (``share_persister.py``). Its state is initialized by the
group's coordinator before the partition is ever assigned (``coordinator/share/state_partitions.py``: recorded as
initializing, InitializeShareGroupState at the group epoch with no start offset, or at 0 for a partition added to a
topic the group already had, then recorded as initialized; a heartbeat that started an initialization waits up to
``INITIALIZE_WAIT_S`` for it, so that a new group's first heartbeat already carries its assignment, where Kafka
answers at once and assigns at the next heartbeat). The first
request that needs it on its leader reads its state (start offset, state batches, state epoch) with this broker's
leader epoch, taking the start offset from ``share.auto.offset.reset`` when none was stored; acknowledgements are
answered once a write of the state they changed has been taken by the coordinator (``replication/share/durable.py``).
A leadership change drops the share-partitions of the partition: the next leader reads them again, and its read fences
this one's writes (FENCED_LEADER_EPOCH), after which its copy is dropped here too. Share groups themselves (epochs,
members, assignments, the share-partitions they have state in) are written to ``__consumer_offsets`` after each change
(``coordinator/share/records.py``) and loaded back with their partition of it by the group coordinator.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine

from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.common.config import BrokerConfig
from pybroker.common.topic import TopicPartition
from pybroker.common.uncancellable import finishes_once_started
from pybroker.controller.metadata import ClusterMetadata, TopicInfo
from pybroker.coordinator.consumer_group import TopicImage
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.group_base import Record
from pybroker.coordinator.share import records as share_records
from pybroker.coordinator.share.configs import GroupConfigStore, ShareConfigs, ShareLimits
from pybroker.coordinator.runtime import CoordinatorStorageError, NotCoordinatorError
from pybroker.coordinator.share.group import ShareGroup, ShareGroups
from pybroker.coordinator.share.state_partitions import Initialization, Partitions, StatePartitions
from pybroker.log import PartitionLog
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ShareGroupHeartbeatResponse
from pybroker.replication.share.durable import DurableBatch, StateWriter, Undo, restored
from pybroker.replication.share.partition import Acquired, SharePartition, Span
from pybroker.server.error_mapping import error_code_for
from pybroker.server.share_persister import SharePersister
from pybroker.server.share_sessions import ShareSession, ShareSessionCache


log = logging.getLogger("pybroker.share")

SharePartitionKey = tuple[str, str, int]
"""(group id, topic name, partition index)."""
TICK_S = 1.0
FENCED = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH})
INITIALIZE_WAIT_S = 1.0
"""How long a heartbeat that asked for share-partitions to be initialized waits for it before answering."""
PERSISTER_ERRORS = {
    ErrorCode.NOT_COORDINATOR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.GROUP_ID_NOT_FOUND: ErrorCode.GROUP_ID_NOT_FOUND,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_STATE_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
}
"""The partition's error for a share coordinator answer that failed its load (others: UNKNOWN_SERVER_ERROR)."""


@dataclass(frozen=True, slots=True)
class ClosedSession:
    """A share session a request closed, and what its member held here then, by share-partition (the copy it was
    held in: one dropped and read again since holds none of it)."""

    session: ShareSession
    held: dict[SharePartitionKey, tuple[SharePartition, list[Acquired]]]


class ShareStateUnavailable(Exception):
    """A share-partition's state could not be loaded; ``code`` is the partition's error in ShareFetch (the next
    request that needs the share-partition reads it again, as Kafka's SharePartitionManager drops a share-partition
    whose initialization failed and adds the partition to the fetch's erroneous ones)."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(f"share-partition state unavailable: {code.name}")
        self.code = code

    @classmethod
    def from_persister(cls, code: ErrorCode) -> ShareStateUnavailable:
        """The share coordinator's answer (or the persister's last one, once it stopped retrying) as the partition's
        error, mapped as Kafka's SharePartition.fetchPersisterError maps it: a coordinator not available, loading
        or moved is COORDINATOR_NOT_AVAILABLE, a fenced state or leader epoch NOT_LEADER_OR_FOLLOWER, anything else
        but an unknown group or partition UNKNOWN_SERVER_ERROR."""
        return cls(PERSISTER_ERRORS.get(code, ErrorCode.UNKNOWN_SERVER_ERROR))


@dataclass(slots=True)
class Load:
    """A share-partition's load as a request found it: ``started`` when that request started it (a failed load is
    the error of the request that started it only, as Kafka's initialization failure is; the others see the
    share-partition not yet available)."""

    task: asyncio.Task[SharePartition]
    started: bool

    def outcome(self) -> SharePartition | None:
        """The share-partition once loaded; None while loading, or when the load failed and another request started
        it (or was cancelled: its partition forgotten meanwhile). A failure this request started is raised."""
        if not self.task.done() or self.task.cancelled():
            return None
        failure = self.task.exception()
        if failure is None:
            return self.task.result()
        if self.started:
            raise failure
        return None


@dataclass(slots=True)
class _Durable:
    """How a share-partition's state is written: its identity at the coordinator, and its writer."""

    topic_id: uuid.UUID
    state_epoch: int
    leader_epoch: int
    writer: StateWriter


class ShareService:
    def __init__(self, config: BrokerConfig, metadata: Callable[[], ClusterMetadata], groups: GroupCoordinator,
                 persister: SharePersister, group_configs: GroupConfigStore,
                 write_records: Callable[[list[tuple[int, Record]]], Awaitable[None]],
                 records_acquirable: Callable[[TopicPartition], None], clock: Clock = SYSTEM_CLOCK) -> None:
        self.persister = persister
        self._records_acquirable = records_acquirable
        self._write_records = write_records
        self._metadata = metadata
        self._groups = groups
        self.clock = clock
        self.limits = ShareLimits.from_config(config)
        self._initialize_retry_ms = max(config["group.share.initialize.retry.interval.ms"],
                                        config["offsets.commit.timeout.ms"])
        self.configs = ShareConfigs(self.limits, group_configs)
        self.groups = ShareGroups(self.configs.settings(""), self.configs.settings, groups.share_groups)
        self.sessions = ShareSessionCache(self.limits.max_share_sessions)
        self.partitions: dict[SharePartitionKey, SharePartition] = {}
        self._durable: dict[SharePartitionKey, _Durable] = {}
        self._loading: dict[SharePartitionKey, asyncio.Task[SharePartition]] = {}
        self._background: set[asyncio.Task[None]] = set()

    def now_ms(self) -> int:
        return self.clock.wall_ms()

    def start(self) -> asyncio.Task[None]:
        """Forget the share-partitions of deleted topics; once a second, fence members whose session timed out and
        drop share sessions idle as long."""
        self._metadata().add_listener(self._on_topic_change)
        return asyncio.get_running_loop().create_task(self._expire_members(), name="share-groups")

    def _on_topic_change(self, name: str, info: TopicInfo | None) -> None:
        """A deleted topic's share-partitions are forgotten here, and the topic leaves the share-partition metadata
        of the groups this broker coordinates (Kafka's maybeCleanupShareGroupState)."""
        if info is not None:
            return
        self._forget(lambda key: key[1] == name)
        metadata = self._metadata()
        for group in list(self.groups.groups.values()):
            state = group.state_partitions
            gone = [t for t, known in state.names.items() if known == name and metadata.topic_by_id(t) is None]
            if state.topics_deleted(gone):
                self._spawn(self._write_logged(group.group_id), f"share-group-topic-deleted-{group.group_id}")

    def _forget(self, which: Callable[[SharePartitionKey], bool]) -> None:
        for key in [key for key in self.partitions if which(key)]:
            del self.partitions[key]
            self._durable.pop(key, None)
        for key in [key for key in self._loading if which(key)]:
            self._loading.pop(key).cancel()

    async def _expire_members(self) -> None:
        while True:
            await self.clock.sleep(TICK_S)
            now = self.now_ms()
            for group_id, member_id in self.groups.expire(now):
                log.info("Member %s of share group %s left: its session timed out", member_id, group_id)
                self.member_left(group_id, member_id)
                await self._write_logged(group_id)
            for session in self.sessions.idle(now, lambda group: self.configs.settings(group).session_timeout_ms):
                self.member_left(session.group_id, session.member_id)
            for group_id, topic, index in list(self.partitions):
                durable = self._durable.get((group_id, topic, index))
                if self.expire(group_id, topic, index, now) or (durable is not None and durable.writer.needs_write()):
                    self.persist_later(group_id, topic, index)  # a failed write of released records: again
            self._drop_unused({key[0] for key in self.partitions})

    @finishes_once_started
    async def write_group(self, group_id: str, deleted: ShareGroup | None = None) -> None:
        """Write what changed in the group's ``__consumer_offsets`` records (all tombstones for ``deleted``), and
        wait for them to be replicated; on failure the next write carries the changes again. Runs to its end
        whatever becomes of the request that asked for it (its client gone): the records are taken as written
        before they are, and only the end of the write may give that back."""
        group = deleted if deleted is not None else self.groups.groups.get(group_id)
        if group is None:
            return
        previous = group.written
        changes = share_records.changes(group, deleted=deleted is not None)
        if not changes:
            return
        partition = self._groups.partition_of(group_id)
        try:
            await self._write_records([(partition, record) for record in changes])
        except Exception:
            group.written = previous
            raise

    async def write_answer(self, group_id: str) -> ErrorCode:
        """``write_group``, its failure as the error code a group API answers (the next write carries the changes)."""
        try:
            await self.write_group(group_id)
        except (CoordinatorStorageError, NotCoordinatorError) as exc:
            log.warning("Writing the records of share group %s failed: %s", group_id, exc)
            return error_code_for(exc)
        return ErrorCode.NONE

    async def _write_logged(self, group_id: str) -> None:
        try:
            await self.write_group(group_id)
        except Exception as exc:  # noqa: BLE001 - the expiry loop goes on; the next change writes again
            log.warning("Writing the records of share group %s failed: %s", group_id, exc)

    def is_other_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a classic or consumer group on this coordinator."""
        return group_id in self._groups.groups

    def member_left(self, group_id: str, member_id: str) -> None:
        """Close the member's share session and release every record it holds on this broker (the new delivery
        states and counts are written, as Kafka writes its releaseAcquiredRecords). When that was the group's last
        share session here, the group's share-partitions are dropped once those writes are done (Kafka's
        ShareGroupListener.onGroupEmpty): the next member reads the state again, so a group deleted meanwhile (and
        perhaps created again) is never served from this broker's copy of its old state."""
        self.sessions.remove(group_id, member_id)
        released = {key: (share, share.release_member(member_id)) for key, share in list(self.partitions.items())
                    if key[0] == group_id}
        self._released(group_id, released)

    def closing(self, session: ShareSession) -> ClosedSession:
        """A request closes ``session`` (already out of the cache): what its member holds here now, to release once
        the request's acknowledgements are written (``closed``)."""
        member_id = session.member_id
        return ClosedSession(session, {key: (share, share.held_by(member_id))
                                       for key, share in self.partitions.items()
                                       if key[0] == session.group_id and share.acquired_by(member_id)})

    def closed(self, closing: ClosedSession) -> None:
        """The end of a request that closed a share session, its acknowledgements written: what the member held
        when the request came is released (Kafka releases it then: releaseSession), as ``member_left`` does. The
        member may have opened a new session while the write waited: that one stays open, and what it acquired
        meanwhile stays its own (before, the whole member was taken to have left: the new session was removed)."""
        session = closing.session
        self.sessions.remove(session.group_id, session.member_id, session)
        self._released(session.group_id, {key: (share, share.release_held(session.member_id, held))
                                          for key, (share, held) in closing.held.items()
                                          if self.partitions.get(key) is share})

    def _released(self, group_id: str, released: dict[SharePartitionKey, tuple[SharePartition, list[Span]]]) -> None:
        """Write the share-partitions of ``group_id`` whose records a member released (each with the spans as they
        were, which a failed write puts back: Kafka's rollbackOrProcessStateUpdates rolls a release back to the
        member's acquisition, until its lock runs out); when the group has no share session left here, drop its
        share-partitions once those writes are done."""
        writes = [self._spawn(self._release_written(key, share, before), "share-release-write-{}-{}-{}".format(*key))
                  for key, (share, before) in released.items() if before]
        if not self._has_session(group_id) and any(key[0] == group_id for key in self.partitions):
            self._spawn(self._group_empty(group_id, writes), f"share-group-empty-{group_id}")

    def _has_session(self, group_id: str) -> bool:
        return any(group == group_id for group, _member in self.sessions.sessions)

    async def _group_empty(self, group_id: str, writes: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*writes)
        self._drop_unused({group_id})

    def _drop_unused(self, group_ids: set[str]) -> None:
        """Drop the share-partitions here of those of ``group_ids`` with no share session open, except those whose
        released records still wait for a write (the expiry loop writes them again, then drops them), those with
        a write under way and those with records still acquired: a request closing its session (already out of the
        cache) writes its acknowledgements before it releases what the member holds, on every share-partition of
        the group, and the release must find them (else the next leader would deliver the records at their count
        before this delivery); records held otherwise are released when their locks run out, then dropped."""
        idle = group_ids - {group for group, _member in self.sessions.sessions}
        if idle:
            self._forget(lambda key: key[0] in idle and key in self.partitions and not self._in_use(key))

    def _in_use(self, key: SharePartitionKey) -> bool:
        share = self.partitions[key]
        return share.unwritten() or share.next_deadline_ms() is not None or self._writing(key)

    def _writing(self, key: SharePartitionKey) -> bool:
        durable = self._durable.get(key)
        return durable is not None and durable.writer.writing()

    def expire(self, group_id: str, topic: str, index: int, now_ms: int) -> int:
        """Release the share-partition's acquisitions whose lock ran out; how many. The caller writes the state
        when any were (Kafka writes on an acquisition lock timeout: the delivery count, or the archiving, of a
        record whose lock expired must survive a restart)."""
        share = self.partitions.get((group_id, topic, index))
        return 0 if share is None else share.expire(now_ms)

    def persist_later(self, group_id: str, topic: str, index: int) -> asyncio.Task[None]:
        """Write the share-partition's state without waiting for it (nothing is answered after it), the change
        counted now (``changed``); a failure is logged, and the next write carries the state again."""
        return self._spawn(self._persist_logged(group_id, topic, index, self.changed(group_id, topic, index)),
                           f"share-state-write-{group_id}-{topic}-{index}")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def after_heartbeat(self, group_id: str, member_id: str, image: TopicImage, full: bool,
                              response: ShareGroupHeartbeatResponse) -> ShareGroupHeartbeatResponse:
        """Write the heartbeat's records with the subscribed partitions still without state marked initializing,
        then have them initialized; when that is done within ``INITIALIZE_WAIT_S`` the member is answered with the
        assignment that includes them (otherwise a later heartbeat gets it)."""
        pending = self.groups.to_initialize(group_id, image, self.now_ms(), self._initialize_retry_ms)
        await self.write_group(group_id)
        group = self.groups.groups.get(group_id)
        if not pending.partitions or group is None:
            return response
        task = self._spawn(self._initialize(group, pending), f"share-state-initialize-{group_id}")
        done, _ = await asyncio.wait({task}, timeout=INITIALIZE_WAIT_S)
        again = self.groups.reconcile(group_id, member_id, image, full) if done else None
        if again is None:
            return response
        await self.write_group(group_id)
        return again

    async def _initialize(self, group: ShareGroup, pending: Initialization) -> None:
        """InitializeShareGroupState of ``pending`` at the group epoch (at its start offsets: a partition new to a
        topic the group already had starts at 0), then the outcome recorded: initialized
        (assignable) or, for those that failed, no longer initializing (the next heartbeat asks again). A share
        coordinator answering FENCED_STATE_EPOCH holds state at this epoch or a later one already: an earlier attempt
        whose outcome was never recorded (its coordinator crashed or moved) initialized it, and no member could read
        it since, as it was never assigned."""
        keys = [(topic_id, index) for topic_id, indexes in sorted(pending.partitions.items())
                for index in sorted(indexes)]
        answers = await asyncio.gather(*(self.persister.initialize(group.group_id, topic_id, index,
                                                                   group.group_epoch, pending.start_offset(topic_id))
                                         for topic_id, index in keys), return_exceptions=True)
        done: Partitions = {}
        failed: Partitions = {}
        for (topic_id, index), answer in zip(keys, answers):
            (done if answer in (ErrorCode.NONE, ErrorCode.FENCED_STATE_EPOCH) else failed).setdefault(
                topic_id, set()).add(index)
        if failed:
            log.warning("Initializing the state of share group %s failed for %s: %s", group.group_id, failed,
                        sorted({str(a) for a in answers if a not in (ErrorCode.NONE, ErrorCode.FENCED_STATE_EPOCH)}))
        if self.groups.groups.get(group.group_id) is not group:  # deleted, or its coordinator moved meanwhile
            return
        group.state_partitions.initialize_done(done)
        group.state_partitions.initialize_failed(failed)
        await self._write_logged(group.group_id)

    async def _persist_logged(self, group_id: str, topic: str, index: int,
                              write: Callable[[], Awaitable[ErrorCode]]) -> None:
        _log_failed((group_id, topic, index), await write())

    def _release_written(self, key: SharePartitionKey, share: SharePartition,
                         before: list[Span]) -> Coroutine[Any, Any, None]:
        """The write of a member's release of ``before`` (counted now, its undo the release's rollback); the records
        it archived at the delivery count limit are counted once it is taken (a failed write undoes them)."""
        write = self.changed(*key, functools.partial(share.rollback, before))
        archived = sum(span.last - span.first + 1 for span in before
                       if span.delivery_count >= share.delivery_count_limit)

        async def written() -> None:
            code = await write()
            _log_failed(key, code)
            if code is ErrorCode.NONE:
                share.counters.archived += archived
        return written()

    @finishes_once_started
    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only an empty one, with its configs and its share-partitions' state in
        ``__share_group_state``, as Kafka's group coordinator deletes it: its topics are recorded as deleting first,
        then DeleteShareGroupState is sent for every partition with state (and for those of an earlier deletion that
        did not finish), and only once all are deleted are the group's tombstones written; the group is forgotten
        once they are replicated. Any failure is the answer and keeps the group, whose deleting record has the next
        DeleteGroups delete the same state again. Runs to its end whatever becomes of the request: the group leaves
        memory before its tombstones are written, and is put back only if that write fails."""
        code = self.groups.deletable(group_id)
        if code is not ErrorCode.NONE:
            return code
        group = self.groups.groups[group_id]
        before = copy.deepcopy(group.state_partitions)
        partitions = group.state_partitions.delete_all(self._partition_count)
        code = await self.write_state(group, before)
        if code is not ErrorCode.NONE:
            return code
        codes = await asyncio.gather(*(self.persister.delete(group_id, topic_id, index)
                                       for topic_id, indexes in sorted(partitions.items())
                                       for index in sorted(indexes)))
        failed = next((c for c in codes if c is not ErrorCode.NONE), None)
        if failed is not None:
            log.warning("Deleting the share-partition state of share group %s failed: %s", group_id, failed.name)
            return failed
        code = self.groups.deletable(group_id) if self.groups.groups.get(group_id) is group \
            else ErrorCode.GROUP_ID_NOT_FOUND
        if code is not ErrorCode.NONE:  # a member joined, or another deletion won, meanwhile
            return code
        del self.groups.groups[group_id]  # no heartbeat may join it while its tombstones are written
        try:
            await self.write_group(group_id, deleted=group)
        except (CoordinatorStorageError, NotCoordinatorError) as exc:
            log.warning("Writing the tombstones of share group %s failed: %s", group_id, exc)
            self.groups.groups.setdefault(group_id, group)
            return error_code_for(exc)
        await self.configs.forget(group_id)
        self._forget(lambda key: key[0] == group_id)
        return ErrorCode.NONE

    async def write_state(self, group: ShareGroup, before: StatePartitions) -> ErrorCode:
        """Write the group's records after a change of its share-partition metadata (``before`` it); when that
        fails the change is undone, so that this coordinator goes on as the log says (a partition it took for
        deleting would otherwise be initialized again, over its state)."""
        try:
            await self.write_group(group.group_id)
        except (CoordinatorStorageError, NotCoordinatorError) as exc:
            log.warning("Writing the share-partitions of share group %s failed: %s", group.group_id, exc)
            group.state_partitions = before
            return error_code_for(exc)
        return ErrorCode.NONE

    def _partition_count(self, topic_id: uuid.UUID) -> int | None:
        info = self._metadata().topic_by_id(topic_id)
        return None if info is None else len(info.partitions)

    def forget_partition(self, group_id: str, topic: str, index: int) -> None:
        """Drop this broker's copy of a share-partition whose stored state was changed by an admin: the next use
        reads it again."""
        self._forget(lambda key: key == (group_id, topic, index))

    def load(self, group_id: str, topic: str, index: int, partition_log: PartitionLog, leader_epoch: int
             ) -> SharePartition | Load:
        """The group's state of a partition this broker leads if it is loaded here, else its load from the share
        coordinator: the one under way (one read however many requests ask), or one started now. The caller waits
        for it as long as it may: ShareFetch no longer than its max wait, as Kafka's, whose SharePartitionManager
        starts the initialization of every share-partition of a fetch at once and answers when the fetch can be
        answered or its wait is over."""
        key = (group_id, topic, index)
        share = self.partitions.get(key)
        if share is not None:
            return share
        started = key not in self._loading
        return Load(self._load_task(key, partition_log, leader_epoch), started)

    def is_loading(self, group_id: str, topic: str, index: int) -> bool:
        return (group_id, topic, index) in self._loading

    def _load_task(self, key: SharePartitionKey, partition_log: PartitionLog, leader_epoch: int
                   ) -> asyncio.Task[SharePartition]:
        """The load of ``key`` under way, or a new one (one read however many requests ask)."""
        task = self._loading.get(key)
        if task is None:
            group_id, topic, index = key
            task = self._loading[key] = asyncio.get_running_loop().create_task(
                self._load(key, partition_log, leader_epoch), name=f"share-state-{group_id}-{topic}-{index}")
            task.add_done_callback(lambda done: self._loaded(key, done))
        return task

    def _loaded(self, key: SharePartitionKey, done: asyncio.Task[SharePartition]) -> None:
        if self._loading.get(key) is done:
            self._loading.pop(key, None)
        failure = None if done.cancelled() else done.exception()  # retrieved even if no request waited for it
        if failure is not None:  # forgotten: the next request that needs it loads it again
            log.info("Share-partition %s of %s-%d was not loaded: %s", *key, failure)

    async def _load(self, key: SharePartitionKey, partition_log: PartitionLog, leader_epoch: int) -> SharePartition:
        group_id, topic, index = key
        info = self._metadata().topic(topic)
        if info is None:
            raise ShareStateUnavailable(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        read = await self.persister.read(group_id, info.topic_id, index, leader_epoch)
        if read.error is not ErrorCode.NONE:
            # INVALID_REQUEST (never initialized: the group's coordinator initializes a partition before assigning
            # it, so no member of the group was given it yet) is UNKNOWN_SERVER_ERROR, as in Kafka.
            raise ShareStateUnavailable.from_persister(read.error)
        start = read.start_offset if read.start_offset >= 0 else self._start_offset(group_id, partition_log)
        share = restored(start, read.batches, delivery_count_limit=self.limits.delivery_count_limit,
                         max_record_locks=self.limits.partition_max_record_locks)

        async def write(start_offset: int, batches: list[DurableBatch]) -> ErrorCode:
            durable = self._durable[key]
            return await self.persister.write(group_id, durable.topic_id, index, durable.state_epoch,
                                               durable.leader_epoch, start_offset, batches)
        writer = StateWriter(share, write, lambda: self._records_acquirable(TopicPartition(topic, index)))
        self._durable[key] = _Durable(info.topic_id, read.state_epoch, leader_epoch, writer)
        if read.start_offset < 0:
            # Initialized by the group coordinator without a start offset: the one share.auto.offset.reset gives now
            # is written before any record is served from it, so a later leader starts there too (with "latest",
            # reading it again would skip what was produced in between) and the group's offsets show it.
            code = await self._durable[key].writer.persist()
            if code is not ErrorCode.NONE:
                self._durable.pop(key, None)
                raise ShareStateUnavailable.from_persister(code)
        self.partitions[key] = share
        log.info("Share-partition %s of %s-%d read at start offset %d (state epoch %d, leader epoch %d)",
                 group_id, topic, index, share.start_offset, read.state_epoch, leader_epoch)
        return share

    def changed(self, group_id: str, topic: str, index: int,
                undo: Undo | None = None) -> Callable[[], Awaitable[ErrorCode]]:
        """Count the change the caller just made to the share-partition, before it awaits anything
        (``StateWriter.changed``); the write that makes it durable, whose answer is the coordinator's. ``undo`` takes
        the change back if that write fails. A fenced write means another leader (or a newer state epoch) owns the
        share-partition: this copy is dropped."""
        key = (group_id, topic, index)
        durable = self._durable.get(key)
        if durable is None:
            if undo is not None:
                undo()
            return _answered(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        change = durable.writer.changed(undo)

        async def write() -> ErrorCode:
            code = await durable.writer.persist(change)
            if code in FENCED and self._durable.get(key) is durable:
                log.info("Share-partition %s of %s-%d was fenced (%s): dropped", group_id, topic, index, code.name)
                self._forget(lambda k: k == key)
            return code
        return write

    def on_leadership_change(self, topic: str, partition: int, _leader_epoch: int, is_leader: bool) -> None:
        """A partition this broker stops leading (or leads anew) forgets its share-partitions: the next leader
        reads them from the share coordinator."""
        self._forget(lambda key: key[1] == topic and key[2] == partition)

    def _start_offset(self, group_id: str, partition_log: PartitionLog) -> int:
        strategy, duration_ms = self.configs.auto_offset_reset(group_id)
        if strategy == "earliest":
            return partition_log.log_start_offset
        if strategy == "by_duration":
            found = partition_log.fetch_offset_by_timestamp(self.now_ms() - duration_ms)
            if found is not None:
                return min(found[0], partition_log.high_watermark)
        return partition_log.high_watermark


def _log_failed(key: SharePartitionKey, code: ErrorCode) -> None:
    if code is not ErrorCode.NONE:
        log.warning("Writing the state of share-partition %s of %s-%d after a release failed: %s", *key, code.name)


def _answered(code: ErrorCode) -> Callable[[], Awaitable[ErrorCode]]:
    """A write that was never needed: its answer is known."""
    async def answer() -> ErrorCode:
        return code
    return answer
