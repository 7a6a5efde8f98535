"""Which follower a leader adds to the ISR: a real log manager and ReplicaManager, the ISR writes answered by
a recording writer, time from a manual clock."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Awaitable, TypeVar

from pybroker.log import LogConfig
from pybroker.log.manager import LogManager
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.append_records import PartitionAppend, append_records
from pybroker.replication.manager import ReplicaManager
from tests.unit.replication.test_data_path import appended

T = TypeVar("T")
LAG_MS = 1_000
CONFIG = LogConfig(segment_bytes=1 << 20)


class ManualClock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def wall_ms(self) -> int:
        return self.now_ms

    def monotonic(self) -> float:
        return self.now_ms / 1000

    async def sleep(self, seconds: float) -> None:
        self.now_ms += int(seconds * 1000)

    async def wait_for(self, awaitable: Awaitable[T], seconds: float) -> T:
        return await awaitable


async def _written(replicas: ReplicaManager) -> None:
    """Wait for the ISR writes in flight, as the broker's loop would run them."""
    await asyncio.gather(*list(replicas._isr_tasks))


def test_only_the_fetching_follower_joins_the_isr(tmp_path: Path) -> None:
    """Chaos round 8302: leader 0 of ctp-2 had dropped followers 1 and 2, which had lost power and came back
    with empty logs; leader 0 kept its epoch, so its table still held follower 2 at the old log end. Follower
    1's first fetch (at offset 0) then added follower 2 to the ISR, the controller later elected it, and the
    committed transaction's records were truncated away on every replica."""
    logs = LogManager([str(tmp_path)], CONFIG)
    logs.startup(1_700_000_000_000)
    clock = ManualClock()
    replicas = ReplicaManager(logs, 0, clock, replica_lag_time_max_ms=LAG_MS)
    writes: list[tuple[int, ...]] = []

    async def isr_writer(topic: str, partition: int, *, leader: int, leader_epoch: int, isr: tuple[int, ...],
                         controller_epoch: int, zk_version: int) -> tuple[tuple[int, ...], int]:
        writes.append(isr)
        return isr, zk_version + 1

    replicas.isr_writer = isr_writer

    async def scenario() -> None:
        partition = replicas.become_leader("t", 0, uuid.UUID(int=1), leader_epoch=0, replicas=(0, 1, 2),
                                           isr=(0, 1, 2), config=CONFIG, min_insync_replicas=1)
        await appended(append_records(replicas, [PartitionAppend("t", 0, build_batch([RecordInput(None, b"v")]))],
                                      required_acks=1, transactional_id=None, allow_zstd=True, now_ms=clock.now_ms))
        for follower in (1, 2):
            replicas.record_follower_fetch("t", 0, follower, 1, current_leader_epoch=0)
        assert partition.log.high_watermark == 1
        clock.now_ms += 2 * LAG_MS  # followers 1 and 2 lose power and stop fetching
        replicas.shrink_isrs()
        await _written(replicas)
        assert partition.isr == (0,) and partition.leader_epoch == 0

        replicas.record_follower_fetch("t", 0, 1, 0, current_leader_epoch=0)  # 1 is back, empty
        await _written(replicas)
        assert partition.isr == (0,), "a follower that did not fetch was added on an old log end offset"

        replicas.record_follower_fetch("t", 0, 1, 1, current_leader_epoch=0)  # 1 caught up
        await _written(replicas)
        assert partition.isr == (0, 1)
        assert writes == [(0,), (0, 1)]

    try:
        asyncio.run(scenario())
    finally:
        logs.shutdown()
