"""A `leader-epoch-checkpoint` write that only drops epochs below a moved log start (retention, DeleteRecords, a
log dir move) is made in the background on the I/O executor, as Kafka's truncateFromStartAsyncFlush: the append
or request that moved the start completes and the epoch cache is right at once, the file follows, and a write
that fails takes the log dir offline. The I/O thread is held on a gate so each step is seen while the write is
still queued, without timing: a write made on the loop would be in the file already."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Awaitable, Callable, Iterator

import pytest

from pybroker.common.clock import SystemClock
from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.log.checkpoint import LeaderEpochCheckpointFile
from pybroker.log.manager import LogManager
from pybroker.log.segment import LogSegment
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.epoch_writes import EpochWrites
from pybroker.replication.log_dir_mover import LogDirMover
from pybroker.replication.log_requests import delete_records_on_leader, last_offset_for_leader_epoch
from pybroker.replication.manager import PartitionRole, ReplicaManager
from pybroker.replication.partition import Partition, epoch_checkpoint_of
from tests.unit.replication.held_io import with_held_io

CONFIG = LogConfig(segment_bytes=100, retention_bytes=1)  # a segment per batch; retention keeps the active one
TOPIC_ID = uuid.UUID(int=12)

Scenario = Callable[[ReplicaManager, IoExecutor, threading.Event], Awaitable[None]]


def _batch() -> bytearray:
    return bytearray(build_batch([RecordInput(b"k", b"v")]))


def _lead(replicas: ReplicaManager, epoch: int) -> Partition:
    replicas.apply_role(PartitionRole("t", 0, TOPIC_ID, BrokerId(0), LeaderEpoch(epoch), (0,), (0,), epoch, 1),
                        None, config=CONFIG, min_insync_replicas=1)
    return replicas.partition("t", 0)


async def _with_two_log_dirs(tmp_path: Path, threads: int,
                             scenario: Callable[[ReplicaManager, LogDirMover, Path], Awaitable[None]]) -> None:
    """``scenario(replicas, mover, target)`` on a broker's parts with log dirs ``a`` and ``target`` (``b``) and
    ``threads`` I/O threads."""
    target = tmp_path / "b"
    logs = LogManager([str(tmp_path / "a"), str(target)], CONFIG)
    logs.startup(0)
    io = IoExecutor(threads)
    logs.attach_executor(io)
    replicas = ReplicaManager(logs, BrokerId(0), SystemClock(), io=io)
    mover = LogDirMover(replicas, io, lambda: 1 << 30)
    try:
        await scenario(replicas, mover, target)
    finally:
        await mover.shutdown()
        io.shutdown()
        logs.shutdown()


def _two_epochs(replicas: ReplicaManager) -> Partition:
    """Offsets 0-1 written at epoch 1, offset 2 at epoch 2, each in a segment of its own; all committed."""
    _lead(replicas, 1)
    for _ in range(2):
        replicas.append("t", 0, _batch(), required_acks=1, now_ms=0)
    partition = _lead(replicas, 2)
    replicas.append("t", 0, _batch(), required_acks=1, now_ms=0)
    assert epoch_checkpoint_of(partition.log).read() == {1: 0, 2: 2} and partition.log.high_watermark == 3
    return partition


async def _with_held_io(tmp_path: Path, scenario: Scenario) -> None:
    await with_held_io(tmp_path, CONFIG, lambda _logs, io: io, scenario)


def test_delete_records_answers_with_the_epoch_file_still_queued(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _two_epochs(replicas)
        deleted = delete_records_on_leader(replicas, "t", 0, 3, alive={0})
        assert (deleted.offset, deleted.low_watermark) == (3, 3)
        assert partition.epoch_cache.entries == [(2, 3)]  # right at once: OffsetForLeaderEpoch answers from it
        assert last_offset_for_leader_epoch(replicas, "t", 0, 1, -1) == (1, 3)
        assert epoch_checkpoint_of(partition.log).read() == {1: 0, 2: 2}
        gate.set()
        await replicas.epochs_written()
        assert epoch_checkpoint_of(partition.log).read() == {2: 3}

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_an_append_after_retention_moved_the_log_start_writes_the_file_in_the_background(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _two_epochs(replicas)
        assert replicas.log_manager.run_retention(0) == 2 and partition.log.log_start_offset == 2
        replicas.append("t", 0, _batch(), required_acks=1, now_ms=0)
        replicas.append("t", 0, _batch(), required_acks=1, now_ms=0)  # the same write: one is queued
        assert partition.epoch_cache.entries == [(2, 2)]
        assert epoch_checkpoint_of(partition.log).read() == {1: 0, 2: 2}
        submitted = io.submitted
        gate.set()
        await replicas.epochs_written()
        assert io.submitted == submitted + 1
        assert epoch_checkpoint_of(partition.log).read() == {2: 2}

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_retention_drops_the_epochs_below_the_log_start_without_an_append(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _two_epochs(replicas)
        assert replicas.log_manager.run_retention(0) == 2
        replicas.drop_epochs_below_log_starts()
        assert partition.epoch_cache.entries == [(2, 2)]
        assert epoch_checkpoint_of(partition.log).read() == {1: 0, 2: 2}
        gate.set()
        await replicas.epochs_written()
        assert epoch_checkpoint_of(partition.log).read() == {2: 2}

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_background_write_overtaken_by_a_newer_one_never_lands_over_it(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _two_epochs(replicas)
        delete_records_on_leader(replicas, "t", 0, 3, alive={0})
        newer = partition.epoch_write({2: 3, 5: 3})
        newer.run()  # on this thread, before the queued one gets its turn
        gate.set()
        await replicas.epochs_written()
        assert epoch_checkpoint_of(partition.log).read() == {2: 3, 5: 3}

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_stale_file_of_a_log_served_again_is_rewritten_in_the_background(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _two_epochs(replicas)
        assert not replicas.stop_replica("t", 0, delete=False, source="test")  # the log stays, as after a restart
        epoch_checkpoint_of(partition.log).write({1: 0, 2: 2, 3: 7})  # past the log end: a tail lost at a crash
        served = _lead(replicas, 2)
        assert served is not partition and served.epoch_cache.entries == [(1, 0), (2, 2)]
        assert epoch_checkpoint_of(served.log).read() == {1: 0, 2: 2, 3: 7}
        gate.set()
        await replicas.epochs_written()
        assert epoch_checkpoint_of(served.log).read() == {1: 0, 2: 2}

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_failed_background_write_takes_the_log_dir_offline(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _two_epochs(replicas)
        (Path(partition.log.dir) / "leader-epoch-checkpoint.tmp").mkdir()  # the write's open fails, even as root
        delete_records_on_leader(replicas, "t", 0, 3, alive={0})
        assert not replicas.log_manager.is_offline("t", 0)
        gate.set()
        await replicas.epochs_written()
        assert replicas.log_manager.is_offline("t", 0)

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_log_moved_to_another_dir_gets_its_epoch_file_off_the_loop(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    written_on_io: list[bool] = []
    write = LeaderEpochCheckpointFile.write

    def recording_write(self: LeaderEpochCheckpointFile, entries: dict[int, int]) -> None:
        written_on_io.append(IoExecutor.on_io_thread())
        write(self, entries)

    async def scenario(replicas: ReplicaManager, mover: LogDirMover, target: Path) -> None:
        partition = _two_epochs(replicas)
        monkeypatch.setattr(LeaderEpochCheckpointFile, "write", recording_write)
        mover.move("t", 0, str(target))
        await asyncio.gather(*mover._tasks.values())
        await replicas.epochs_written()
        assert partition.log.dir.startswith(str(target))
        assert epoch_checkpoint_of(partition.log).read() == {1: 0, 2: 2}
        assert written_on_io == [True]

    asyncio.run(_with_two_log_dirs(tmp_path, 1, scenario))


def test_retention_while_a_new_epoch_is_written_never_writes_the_file_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A role change writes the new epoch before the cache has it (the replica is fenced meanwhile): a write taken
    from the cache then, for a log start retention moved, would land over it without the epoch the replica is about
    to append at."""
    contents: list[dict[int, int]] = []
    on_io: list[bool] = []
    write = LeaderEpochCheckpointFile.write

    def recording_write(self: LeaderEpochCheckpointFile, entries: dict[int, int]) -> None:
        contents.append(dict(entries))
        on_io.append(IoExecutor.on_io_thread())
        write(self, entries)

    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _two_epochs(replicas)
        role = PartitionRole("t", 0, TOPIC_ID, BrokerId(0), LeaderEpoch(4), (0,), (0,), 4, 1)
        writes = EpochWrites(io)
        leading = asyncio.ensure_future(replicas.role_changes.apply_role_later(role, None, config=CONFIG,
                                                                               min_insync_replicas=1, writes=writes))
        writing = asyncio.ensure_future(writes.write())
        await asyncio.sleep(0)
        assert not partition.is_leader and partition.leader_epoch == 4  # fenced, its file queued
        monkeypatch.setattr(LeaderEpochCheckpointFile, "write", recording_write)
        assert replicas.log_manager.run_retention(0) == 2
        replicas.drop_epochs_below_log_starts()
        gate.set()
        await asyncio.gather(writing, leading)
        await replicas.epochs_written()
        assert partition.is_leader and epoch_checkpoint_of(partition.log).read() == {2: 2, 4: 3}
        assert contents[0] == {1: 0, 2: 2, 4: 3} and all(4 in entries for entries in contents), contents
        assert all(on_io), on_io  # the epochs retention dropped meanwhile too: the new epoch is durable already

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_log_dir_move_swapping_the_log_while_a_new_epoch_is_written_leaves_the_epoch_in_the_new_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The role change's write went to the file of the log swapped out (renamed away meanwhile): the new log's file
    gets the whole cache when the replica leads, and the failed write of the old file fails no log dir."""
    entered, release = threading.Event(), threading.Event()
    write = LeaderEpochCheckpointFile.write

    def held_write(self: LeaderEpochCheckpointFile, entries: dict[int, int]) -> None:
        if 4 in entries and not release.is_set():  # the role change's, on one of the two I/O threads
            entered.set()
            release.wait(10)
        write(self, entries)

    async def scenario(replicas: ReplicaManager, mover: LogDirMover, target: Path) -> None:
        partition = _two_epochs(replicas)
        monkeypatch.setattr(LeaderEpochCheckpointFile, "write", held_write)
        writes = EpochWrites(replicas.io)
        leading = asyncio.ensure_future(replicas.role_changes.apply_role_later(
            PartitionRole("t", 0, TOPIC_ID, BrokerId(0), LeaderEpoch(4), (0,), (0,), 4, 1), None, config=CONFIG,
            min_insync_replicas=1, writes=writes))
        writing = asyncio.ensure_future(writes.write())
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
            mover.move("t", 0, str(target))
            await asyncio.gather(*mover._tasks.values())  # copied by the other I/O thread, then swapped
            assert partition.log.dir.startswith(str(target)) and not partition.is_leader
        finally:
            release.set()
        await asyncio.gather(writing, leading)
        await replicas.epochs_written()
        assert partition.is_leader and not replicas.log_manager.is_offline("t", 0)
        assert epoch_checkpoint_of(partition.log).read() == {1: 0, 2: 2, 4: 3}

    asyncio.run(_with_two_log_dirs(tmp_path, 2, scenario))


def test_epoch_caches_loaded_at_start_up_leave_the_first_hosting_no_file_to_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing checkpoint is rebuilt from every batch header: at start-up (`load_epoch_caches`, before anything is
    served), not when the first LeaderAndIsr hosts the replica on the loop; the rebuilt file is written after."""
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        partition = _two_epochs(replicas)
        assert not replicas.stop_replica("t", 0, delete=False, source="test")
        Path(epoch_checkpoint_of(partition.log).path).unlink()  # as after a crash, or a damaged file
        replicas.load_epoch_caches()
        reads: list[str] = []

        def no_read(self: object) -> Iterator[tuple[int, int]]:
            reads.append(repr(self))
            return iter(())

        monkeypatch.setattr(LogSegment, "iter_headers", no_read)
        monkeypatch.setattr(LeaderEpochCheckpointFile, "read", no_read)
        served = _lead(replicas, 2)
        assert served.epoch_cache.entries == [(1, 0), (2, 2)] and reads == []
        monkeypatch.undo()
        gate.set()
        await replicas.epochs_written()
        assert epoch_checkpoint_of(served.log).read() == {1: 0, 2: 2}

    asyncio.run(_with_held_io(tmp_path, scenario))
