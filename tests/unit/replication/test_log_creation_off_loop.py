"""A new replica's log is made on the I/O executor (`RoleChanges.become_leader_async`): until it is served
the partition answers NOT_LEADER_OR_FOLLOWER, a StopReplica meanwhile wins and leaves no files behind, a
cancelled request does not stop it half-way, and the served log has its first leader epoch on disk. The I/O thread is held on a gate so each step is seen
while the creation is still queued, without timing."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import pytest

from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.log.manager import LogManager
from pybroker.replication.errors import NotLeaderError, UnknownPartitionError
from pybroker.replication.manager import PartitionRole, ReplicaManager
from pybroker.replication.partition import epoch_checkpoint_of
from tests.unit.replication.held_io import turns_until, with_held_io

CONFIG = LogConfig()
TOPIC_ID = uuid.UUID(int=7)


async def _with_held_io(tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    await with_held_io(tmp_path, CONFIG, lambda logs, _io: logs, scenario)


def _lead(replicas: ReplicaManager) -> asyncio.Future[object]:
    return asyncio.ensure_future(replicas.role_changes.become_leader_async(
        "t", 0, TOPIC_ID, leader_epoch=3, replicas=(0,), isr=(0,), config=CONFIG, min_insync_replicas=1))


def test_a_partition_is_served_once_its_log_is_durable(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, logs: LogManager, gate: threading.Event) -> None:
        leading = _lead(replicas)
        await asyncio.sleep(0)  # one turn of the loop: the creation is queued behind the held I/O thread
        assert replicas.role_changes.must_create_log("t", 0) and not leading.done()
        with pytest.raises(NotLeaderError):
            replicas.leader_partition("t", 0)
        with pytest.raises(UnknownPartitionError):
            replicas.leader_partition("t", 1)
        gate.set()
        partition = await leading
        assert replicas.leader_partition("t", 0) is partition
        assert epoch_checkpoint_of(partition.log).read() == {3: 0}
        assert partition.log.topic_id == TOPIC_ID

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_replica_stopped_while_its_log_is_made_leaves_no_files(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, logs: LogManager, gate: threading.Event) -> None:
        leading = _lead(replicas)
        await asyncio.sleep(0)
        replicas.remove_topic("t")  # the topic was deleted meanwhile
        gate.set()
        with pytest.raises(NotLeaderError):
            await leading
        assert replicas.hosted("t", 0) is None and logs.get_log("t", 0) is None
        await logs.wait_removed()
        assert not [path.name for path in tmp_path.iterdir() if path.name.startswith("t-0")]
        assert replicas.role_changes.must_create_log("t", 0)

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_creation_whose_request_is_cancelled_still_serves_the_replica(tmp_path: Path) -> None:
    """The controller's connection closes while its LeaderAndIsr waits for a new log: the request is cancelled,
    the creation is not stopped half-way (a log made and no replica served), and the replica leads."""
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        role = PartitionRole("t", 0, TOPIC_ID, BrokerId(0), LeaderEpoch(3), (0,), (0,), 0, 1)

        async def leader_and_isr() -> None:
            await replicas.role_changes.apply_role_async(role, None, config=CONFIG, min_insync_replicas=1)

        request = asyncio.ensure_future(leader_and_isr())
        await asyncio.sleep(0)  # the creation is queued behind the held I/O thread
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        gate.set()
        await io.run(lambda: None)  # after the creation's files, on the one I/O thread
        await turns_until(lambda: replicas.hosted("t", 0) is not None, "the creation's task to apply the role")
        partition = replicas.leader_partition("t", 0)
        assert partition.leader_epoch == 3 and epoch_checkpoint_of(partition.log).read() == {3: 0}

    asyncio.run(with_held_io(tmp_path, CONFIG, lambda _logs, io: io, scenario))
