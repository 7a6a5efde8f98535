"""A leader's ISR writes: one at a time per partition, each at the leader epoch and version it was decided at. A
real log manager and ReplicaManager, the writes answered by a writer that refuses a stale leader epoch as the
controller does, time from a manual clock."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from pybroker.log import LogConfig
from pybroker.log.manager import LogManager
from pybroker.replication.manager import ReplicaManager
from tests.unit.replication.test_isr_expansion import LAG_MS, ManualClock

CONFIG = LogConfig(segment_bytes=1 << 20)
TOPIC_ID = uuid.UUID(int=3)


def test_a_shrink_decided_before_a_leader_and_isr_is_written_at_the_epoch_it_was_decided_at(tmp_path: Path) -> None:
    """The shrink's task starts after a LeaderAndIsr that came in the same turn of the loop: it was sent at the new
    epoch, beside the new epoch's own shrink, two writes of one partition at once."""
    logs = LogManager([str(tmp_path)], CONFIG)
    logs.startup(1_700_000_000_000)
    clock = ManualClock()
    replicas = ReplicaManager(logs, 0, clock, replica_lag_time_max_ms=LAG_MS)
    sent: list[tuple[int, tuple[int, ...], int]] = []

    async def isr_writer(topic: str, partition: int, *, leader: int, leader_epoch: int, isr: tuple[int, ...],
                         controller_epoch: int, zk_version: int) -> tuple[tuple[int, ...], int] | None:
        sent.append((leader_epoch, isr, zk_version))
        stored = replicas.partition(topic, partition)
        return (isr, zk_version + 1) if leader_epoch == stored.leader_epoch else None  # FENCED_LEADER_EPOCH

    replicas.isr_writer = isr_writer

    def lead(epoch: int) -> None:
        replicas.become_leader("t", 0, TOPIC_ID, leader_epoch=epoch, replicas=(0, 1, 2), isr=(0, 1, 2),
                               config=CONFIG, min_insync_replicas=1, zk_version=epoch)

    async def scenario() -> None:
        lead(0)
        clock.now_ms += 2 * LAG_MS  # followers 1 and 2 stop fetching
        replicas.shrink_isrs()
        lead(1)  # in the same turn: the shrink's task has not started
        clock.now_ms += 2 * LAG_MS
        replicas.shrink_isrs()
        await asyncio.gather(*list(replicas._isr_tasks))
        assert sorted(sent) == [(0, (0,), 0), (1, (0,), 1)]
        partition = replicas.partition("t", 0)
        assert (partition.leader_epoch, partition.isr, partition.zk_version) == (1, (0,), 2)

    try:
        asyncio.run(scenario())
    finally:
        logs.shutdown()
