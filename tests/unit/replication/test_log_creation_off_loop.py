"""A new replica's log is made on the I/O executor (`ReplicaManager.become_leader_async`): until it is served
the partition answers NOT_LEADER_OR_FOLLOWER, a StopReplica meanwhile wins and leaves no files behind, and
the served log has its first leader epoch on disk. The I/O thread is held on a gate so each step is seen
while the creation is still queued, without timing."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import pytest

from pybroker.log import LogConfig
from pybroker.log.manager import LogManager
from pybroker.replication.errors import NotLeaderError, UnknownPartitionError
from pybroker.replication.manager import ReplicaManager
from pybroker.replication.partition import epoch_checkpoint_of
from tests.unit.replication.held_io import with_held_io

CONFIG = LogConfig()
TOPIC_ID = uuid.UUID(int=7)


async def _with_held_io(tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    await with_held_io(tmp_path, CONFIG, lambda logs, _io: logs, scenario)


def _lead(replicas: ReplicaManager) -> asyncio.Future[object]:
    return asyncio.ensure_future(replicas.become_leader_async(
        "t", 0, TOPIC_ID, leader_epoch=3, replicas=(0,), isr=(0,), config=CONFIG, min_insync_replicas=1))


def test_a_partition_is_served_once_its_log_is_durable(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, logs: LogManager, gate: threading.Event) -> None:
        leading = _lead(replicas)
        await asyncio.sleep(0)  # one turn of the loop: the creation is queued behind the held I/O thread
        assert replicas.must_create_log("t", 0) and not leading.done()
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
        assert replicas.must_create_log("t", 0)

    asyncio.run(_with_held_io(tmp_path, scenario))
