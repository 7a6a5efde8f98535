"""An existing replica that is to lead at a new epoch writes its `leader-epoch-checkpoint` on the I/O executor
(`RoleChanges.apply_role_later`, the LeaderAndIsr path): meanwhile it is fenced (produce is answered
NOT_LEADER_OR_FOLLOWER, a repeated epoch is stale), it leads only once the file is durable, a request's files
are written by one call on the executor, and a later role change of the same replica applies after it. The
I/O thread is held on a gate so each step is seen while the write is still queued, without timing."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.log.checkpoint import LeaderEpochCheckpointFile
from pybroker.log.errors import LogStorageError
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.epoch_writes import EpochFile, EpochWrites
from pybroker.replication.errors import NotLeaderError
from pybroker.replication.manager import PartitionRole, ReplicaManager
from pybroker.replication.partition import Partition, epoch_checkpoint_of
from tests.unit.replication.held_io import with_held_io

CONFIG = LogConfig()
TOPIC_ID = uuid.UUID(int=9)

Scenario = Callable[[ReplicaManager, IoExecutor, threading.Event], Awaitable[None]]


async def _with_held_io(tmp_path: Path, scenario: Scenario) -> None:
    await with_held_io(tmp_path, CONFIG, lambda _logs, io: io, scenario)


def _batch() -> bytearray:
    return bytearray(build_batch([RecordInput(b"k", b"v")]))


def _role(index: int, leader: int, epoch: int) -> PartitionRole:
    return PartitionRole("t", index, TOPIC_ID, BrokerId(leader), LeaderEpoch(epoch), (0, 1), (0, 1), epoch, 1)


def _led_once(replicas: ReplicaManager, index: int) -> Partition:
    """A replica led at epoch 1 with one record, then following broker 1 at epoch 2 (no fetching here)."""
    replicas.apply_role(_role(index, 0, 1), None, config=CONFIG, min_insync_replicas=1)
    replicas.append("t", index, _batch(), required_acks=1, now_ms=0)
    replicas.apply_role(_role(index, 1, 2), None, config=CONFIG, min_insync_replicas=1)
    return replicas.partition("t", index)


def _later(replicas: ReplicaManager, role: PartitionRole, writes: EpochWrites) -> asyncio.Future[None]:
    assert replicas.role_changes.must_apply_later(role)
    return asyncio.ensure_future(replicas.role_changes.apply_role_later(role, None, config=CONFIG, min_insync_replicas=1,
                                                           writes=writes))


def test_a_replica_leads_at_its_new_epoch_once_the_checkpoint_is_durable(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partitions = [_led_once(replicas, index) for index in range(3)]
        writes = EpochWrites(io)
        leading = [_later(replicas, _role(index, 0, 3), writes) for index in range(3)]
        submitted = io.submitted
        writing = asyncio.ensure_future(writes.write())
        for _ in range(2):  # two turns of the loop: the write starts its call, which is queued behind the held thread
            await asyncio.sleep(0)
        assert io.submitted == submitted + 1  # the three files in one call (half of one thread is one)
        for partition in partitions:
            assert epoch_checkpoint_of(partition.log).read() == {1: 0}
            assert partition.leader_epoch == 3 and not partition.is_leader
            with pytest.raises(NotLeaderError):
                replicas.leader_partition("t", partition.index)
            with pytest.raises(NotLeaderError):
                replicas.append("t", partition.index, _batch(), required_acks=1,
                                now_ms=0)
        assert not any(role.done() for role in leading)
        gate.set()
        await writing
        await asyncio.gather(*leading)
        for partition in partitions:
            assert replicas.leader_partition("t", partition.index) is partition
            assert epoch_checkpoint_of(partition.log).read() == {1: 0, 3: 1}
            assert partition.append_as_leader(_batch(), required_acks=1,
                                              now_ms=0).first_offset == 1

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_later_role_change_of_the_replica_applies_after_the_pending_one(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _led_once(replicas, 0)
        first, second = EpochWrites(io), EpochWrites(io)
        leading = _later(replicas, _role(0, 0, 3), first)
        writing = asyncio.ensure_future(first.write())
        following = _later(replicas, _role(0, 1, 4), second)  # the controller moved it on meanwhile
        await second.write()  # nothing of its own to write yet: it waits for the first change
        await asyncio.sleep(0)
        assert not following.done() and partition.leader_epoch == 3
        gate.set()
        await asyncio.gather(writing, leading, following)
        assert partition.leader_epoch == 4 and partition.leader_id == 1
        assert epoch_checkpoint_of(partition.log).read() == {1: 0, 3: 1}
        assert not replicas.role_changes.must_apply_later(_role(0, 1, 5))

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_leader_fenced_for_its_new_epoch_keeps_its_coordinators_unless_stopped(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        events: list[tuple[int, int, bool]] = []
        replicas.leadership_listeners.append(lambda _t, index, epoch, is_leader: events.append(
            (index, epoch, is_leader)))
        for index in range(2):
            replicas.apply_role(_role(index, 0, 1), None, config=CONFIG, min_insync_replicas=1)
        writes = EpochWrites(io)
        kept, stopped = (_later(replicas, _role(index, 0, 2), writes) for index in range(2))
        writing = asyncio.ensure_future(writes.write())
        await asyncio.sleep(0)
        assert not replicas.stop_replica("t", 1, delete=False, source="test")
        gate.set()
        await writing
        await kept
        with pytest.raises(NotLeaderError):
            await stopped
        # An epoch bump of a partition it led already is no new election; the stopped one resigned once.
        assert events == [(0, 1, True), (1, 1, True), (1, 2, False)]
        assert replicas.leader_partition("t", 0).leader_epoch == 2

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_failed_write_takes_the_log_dir_offline(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        failing = _led_once(replicas, 0)
        (Path(failing.log.dir) / "leader-epoch-checkpoint.tmp").mkdir()  # the write's open fails, even as root
        gate.set()
        writes = EpochWrites(io)
        leading = _later(replicas, _role(0, 0, 3), writes)
        await writes.write()
        with pytest.raises(LogStorageError):
            await leading
        assert replicas.log_manager.is_offline("t", 0)

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_write_the_stopping_broker_never_made_leaves_the_replica_unled_and_its_log_dir_online(
        tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        unwritten = _led_once(replicas, 0)
        stopped_io = IoExecutor(1)
        stopped_io.shutdown()  # as at the broker's stop: the write cannot be made at all
        writes = EpochWrites(stopped_io)
        leading = _later(replicas, _role(0, 0, 3), writes)
        await writes.write()
        with pytest.raises(NotLeaderError):
            await leading
        assert epoch_checkpoint_of(unwritten.log).read() == {1: 0} and not unwritten.is_leader
        assert not replicas.log_manager.is_offline("t", 0)

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_request_s_files_are_shared_out_over_half_the_io_threads(tmp_path: Path) -> None:
    async def scenario() -> None:
        io = IoExecutor(4)
        writes = EpochWrites(io)
        files = [LeaderEpochCheckpointFile(str(tmp_path / f"checkpoint-{n}")) for n in range(5)]
        written = [writes.add(EpochFile().take(checkpoint, {n: 10 * n})) for n, checkpoint in enumerate(files)]
        await writes.write()
        io.shutdown()
        assert io.submitted == 2 and all(done.done() and done.exception() is None for done in written)
        assert [checkpoint.read() for checkpoint in files] == [{n: 10 * n} for n in range(5)]

    asyncio.run(scenario())
