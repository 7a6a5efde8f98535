"""A follower writes its `leader-epoch-checkpoint` on the I/O executor (`ReplicaFetcher`), in Kafka's order: the
new epochs a fetch answer brings are durable before its batches are appended (an answer's files in one call), a
truncation is durable before the next fetch, and a write overtaken by a newer one (a LeaderAndIsr making the
replica lead meanwhile) never lands over it. The I/O thread is held on a gate so each step is seen while its
write is still queued, without timing; the leader is scripted (the `LeaderEndPoint` seam), since its answers are
what each step needs."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Awaitable, Callable

from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.log.checkpoint import LeaderEpochCheckpointFile
from pybroker.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.epoch_writes import EpochFile
from pybroker.replication.fetcher import FetcherConfig
from pybroker.replication.manager import PartitionRole, ReplicaManager
from pybroker.replication.partition import Partition, epoch_checkpoint_of
from tests.unit.replication.held_io import turns_until, with_held_io

CONFIG = LogConfig()
TOPIC_ID = uuid.UUID(int=11)
LEADER = BrokerId(1)
ANSWER_S = 10
"""Only a bound on a wait for the broker's own progress, never a synchronization."""


class ScriptedLeader:
    """The leader broker as the follower sees it: each request waits for the answer the test hands over."""

    def __init__(self) -> None:
        self.fetches: asyncio.Queue[FetchRequest] = asyncio.Queue()
        self.fetch_answers: asyncio.Queue[FetchResponse] = asyncio.Queue()
        self.epoch_answers: asyncio.Queue[OffsetForLeaderEpochResponse] = asyncio.Queue()

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        await self.fetches.put(request)
        return await self.fetch_answers.get()

    async def offsets_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
        return await self.epoch_answers.get()

    async def list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        raise AssertionError("no fetch of these tests is out of range")

    async def close(self) -> None:
        return None

    async def next_fetch(self) -> dict[int, int]:
        """The next fetch's offset per partition."""
        request = await asyncio.wait_for(self.fetches.get(), ANSWER_S)
        return {p.partition: p.fetch_offset for topic in request.topics for p in topic.partitions}


Scenario = Callable[[ReplicaManager, IoExecutor, threading.Event, ScriptedLeader], Awaitable[None]]


async def _with_held_io(tmp_path: Path, scenario: Scenario) -> None:
    leader = ScriptedLeader()

    async def started(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        replicas.enable_fetching(FetcherConfig(replica_id=0, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                                               response_max_bytes=10 << 20, backoff_ms=10),
                                 lambda _leader_id, _host, _port: leader)
        try:
            await scenario(replicas, io, gate, leader)
        finally:
            await replicas.shutdown()

    await with_held_io(tmp_path, CONFIG, lambda _logs, io: io, started)


def _role(index: int, leader: int, epoch: int) -> PartitionRole:
    return PartitionRole("t", index, TOPIC_ID, BrokerId(leader), LeaderEpoch(epoch), (0, 1), (0, 1), epoch, 1)


def _follow(replicas: ReplicaManager, index: int, epoch: int) -> Partition:
    replicas.apply_role(_role(index, LEADER, epoch), ("127.0.0.1", 1), config=CONFIG, min_insync_replicas=1)
    return replicas.partition("t", index)


def _answer(batches: dict[int, bytes], high_watermark: int = 0) -> FetchResponse:
    return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[
        FetchResponse.PartitionData(partition_index=index, high_watermark=high_watermark, log_start_offset=0,
                                    records=records) for index, records in batches.items()])])


def _batch(epoch: int, base_offset: int) -> bytes:
    return build_batch([RecordInput(b"k", b"v")], base_offset=base_offset, partition_leader_epoch=epoch)


def _on_disk(partition: Partition) -> dict[int, int]:
    return epoch_checkpoint_of(partition.log).read()


def test_a_fetched_new_epoch_is_durable_before_its_batches_are_appended(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event, leader: ScriptedLeader) -> None:
        partitions = [_follow(replicas, index, 2) for index in range(3)]
        assert await leader.next_fetch() == {0: 0, 1: 0, 2: 0}
        submitted = io.submitted
        await leader.fetch_answers.put(_answer({index: _batch(2, 0) for index in range(3)}))
        await turns_until(lambda: io.submitted > submitted, "the checkpoints to be submitted")
        assert io.submitted == submitted + 1  # the answer's three files in one call (half of one thread is one)
        for partition in partitions:  # the loop runs on, and nothing is appended while the epoch is not durable
            assert partition.log.log_end_offset == 0 and partition.epoch_cache.entries == []
            assert _on_disk(partition) == {}
        gate.set()
        assert await leader.next_fetch() == {0: 1, 1: 1, 2: 1}
        for partition in partitions:
            assert _on_disk(partition) == {2: 0} and partition.epoch_cache.entries == [(2, 0)]

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_truncation_is_durable_before_the_next_fetch(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event, leader: ScriptedLeader) -> None:
        for epoch, first in ((1, 0), (3, 5)):  # led at epoch 1 for offsets 0-4, at epoch 3 for 5-9
            replicas.apply_role(_role(0, 0, epoch), None, config=CONFIG, min_insync_replicas=1)
            for _ in range(5):
                replicas.append("t", 0, bytearray(_batch(epoch, 0)), required_acks=1, now_ms=0)
        partition = replicas.partition("t", 0)
        assert _on_disk(partition) == {1: 0, 3: 5}
        submitted = io.submitted
        _follow(replicas, 0, 4)
        # The new leader never had epoch 3: its epoch 1 ends at 5 (KIP-279), where the follower cuts its log.
        await leader.epoch_answers.put(OffsetForLeaderEpochResponse(topics=[
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic="t", partitions=[
                OffsetForLeaderEpochResponse.EpochEndOffset(partition=0, leader_epoch=1, end_offset=5)])]))
        await turns_until(lambda: io.submitted > submitted, "the truncated checkpoint to be submitted")
        assert partition.log.log_end_offset == 5 and partition.epoch_cache.entries == [(1, 0)]
        assert _on_disk(partition) == {1: 0, 3: 5}  # start-up would cut this entry at the log end
        assert leader.fetches.empty()  # nothing fetched, so nothing appended, before the file lost epoch 3
        gate.set()
        assert await leader.next_fetch() == {0: 5}
        assert _on_disk(partition) == {1: 0}
        await leader.fetch_answers.put(_answer({0: _batch(4, 5)}))
        assert await leader.next_fetch() == {0: 6}
        assert _on_disk(partition) == {1: 0, 4: 5}

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_a_write_overtaken_by_a_role_change_never_lands_over_it(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event, leader: ScriptedLeader) -> None:
        partition = _follow(replicas, 0, 2)
        await leader.next_fetch()
        submitted = io.submitted
        await leader.fetch_answers.put(_answer({0: _batch(2, 0)}))
        await turns_until(lambda: io.submitted > submitted, "the fetched epoch's checkpoint to be submitted")
        # The controller makes this replica lead at epoch 5 while the follower's write of epoch 2 is queued.
        replicas.apply_role(_role(0, 0, 5), None, config=CONFIG, min_insync_replicas=1)
        assert _on_disk(partition) == {5: 0}
        gate.set()
        await io.run(lambda: None)  # after the queued write, on the one I/O thread
        assert _on_disk(partition) == {5: 0} and partition.log.log_end_offset == 0

    asyncio.run(_with_held_io(tmp_path, scenario))


def test_of_two_writes_of_a_file_the_newer_stands_whichever_runs_last(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile(str(tmp_path / "leader-epoch-checkpoint"))
    file = EpochFile()
    older, newer = file.take(checkpoint, {1: 0}), file.take(checkpoint, {1: 0, 2: 7})
    newer.run()
    older.run()
    assert checkpoint.read() == {1: 0, 2: 7}
    file.take(checkpoint, {1: 0}).run()  # taken later: the file follows the cache back (a truncation)
    assert checkpoint.read() == {1: 0}


def test_a_fetched_epoch_that_cannot_be_written_fails_the_log_dir_and_appends_nothing(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event, leader: ScriptedLeader) -> None:
        gate.set()
        partition = _follow(replicas, 0, 2)
        await leader.next_fetch()
        Path(epoch_checkpoint_of(partition.log).path + ".tmp").mkdir()  # where the write goes first: it fails
        submitted = io.submitted
        await leader.fetch_answers.put(_answer({0: _batch(2, 0)}))
        await turns_until(lambda: io.submitted > submitted, "the checkpoint to be submitted")
        await io.run(lambda: None)  # after the failed write, on the one I/O thread
        await turns_until(lambda: replicas.log_manager.is_offline("t", 0), "the log dir to fail")
        assert partition.log.log_end_offset == 0 and partition.epoch_cache.entries == []

    asyncio.run(_with_held_io(tmp_path, scenario))
