"""OffsetCommit values become visible only once their records are replicated (Kafka stages them
as pendingOffsetCommits): the coordinator runtime on a real ``__consumer_offsets`` log, whose high
watermark stands for the in-sync replicas."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pybroker.common.clock import ManualClock
from pybroker.coordinator.coordinator import GroupConfig, GroupCoordinator
from pybroker.coordinator.records import Record
from pybroker.coordinator.runtime import CoordinatorRuntime, CoordinatorStorageError
from pybroker.log import PartitionLog
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse
from pybroker.records import RecordInput, build_batch
from pybroker.server.handlers.offsets import _fetched
from tests.unit.log.logtest_util import NOW, open_log

GROUP = "g"
TP = ("t", 0)


class IsrTimeout(Exception):
    """The in-sync replicas did not catch up in time (offsets.commit.timeout.ms)."""


class Harness:
    """Persists to a real log; ``replicated`` waits until its high watermark passes the write."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.coordinator = GroupCoordinator(GroupConfig(num_partitions=1))
        self.runtime = CoordinatorRuntime(self.coordinator, self.persist, ManualClock(wall_ms=NOW), self.replicated)
        self.hw_moved = asyncio.Event()
        self.isr_lost = False

    def persist(self, partition: int, records: list[Record]) -> int:
        batch = build_batch([RecordInput(key, value) for key, value in records])
        return self.log.append_as_leader(bytearray(batch), leader_epoch=0, now_ms=NOW).last_offset + 1

    async def replicated(self, partition: int, end_offset: int) -> None:
        while self.log.high_watermark < end_offset:
            if self.isr_lost:
                raise IsrTimeout(f"high watermark {self.log.high_watermark} below {end_offset}")
            self.hw_moved.clear()
            await self.hw_moved.wait()

    def replicate(self) -> None:
        self.log.high_watermark = self.log.log_end_offset
        self.hw_moved.set()

    def fail_isr(self) -> None:
        self.isr_lost = True
        self.hw_moved.set()

    def commit(self, offset: int) -> asyncio.Future[Any]:
        request = commit_request(offset)
        return asyncio.ensure_future(self.runtime.call(
            lambda waiter, now: self.coordinator.commit_offsets(waiter, request, now)))

    def fetched(self, *, require_stable: bool) -> tuple[int, int]:
        """(committed offset, error code) as OffsetFetch v8 answers for TP."""
        topics = _fetched(self.coordinator, GROUP, [OffsetFetchRequest.OffsetFetchRequestTopics(
            name=TP[0], partition_indexes=[TP[1]])], OffsetFetchResponse.OffsetFetchResponseTopics,
            OffsetFetchResponse.OffsetFetchResponsePartitions, require_stable)
        partition = topics[0].partitions[0]
        return partition.committed_offset, partition.error_code


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(open_log(tmp_path / "__consumer_offsets-0"))


def test_a_commit_waiting_for_the_isr_is_invisible_and_unstable_until_replicated(harness: Harness) -> None:
    async def scenario() -> None:
        first = harness.commit(5)
        await settle()
        harness.replicate()
        await first
        second = harness.commit(9)
        await settle()
        assert harness.log.log_end_offset > harness.log.high_watermark  # written, not replicated
        assert harness.fetched(require_stable=False) == (5, ErrorCode.NONE)
        assert harness.fetched(require_stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
        harness.replicate()
        response = await second
        assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
        assert harness.fetched(require_stable=True) == (9, ErrorCode.NONE)

    asyncio.run(scenario())


def test_a_commit_the_isr_never_acknowledges_leaves_the_previous_offset(harness: Harness) -> None:
    async def scenario() -> None:
        first = harness.commit(5)
        await settle()
        harness.replicate()
        await first
        second = harness.commit(9)
        await settle()
        harness.fail_isr()
        with pytest.raises(CoordinatorStorageError):
            await second
        assert harness.fetched(require_stable=True) == (5, ErrorCode.NONE)
        assert not harness.coordinator.groups[GROUP].pending_offsets

    asyncio.run(scenario())


def test_a_commit_whose_append_fails_leaves_the_previous_offset(harness: Harness) -> None:
    async def scenario() -> None:
        first = harness.commit(5)
        await settle()
        harness.replicate()
        await first
        harness.log.close()  # every append now raises
        with pytest.raises(CoordinatorStorageError):
            await harness.commit(9)
        assert harness.fetched(require_stable=True) == (5, ErrorCode.NONE)

    asyncio.run(scenario())


def commit_request(offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=TP[0], partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=TP[1], committed_offset=offset)])])


def test_a_failed_first_commit_leaves_nothing_and_the_group_can_expire() -> None:
    coordinator = GroupCoordinator(GroupConfig(offsets_retention_ms=1000, offsets_retention_check_interval_ms=100))
    out = coordinator.commit_offsets("waiter", commit_request(7), 0)
    coordinator.offsets_failed(out.staged)
    assert coordinator.fetch_offsets(GROUP, [(TP[0], [TP[1]])]) == [(TP[0], [(TP[1], None)])]
    coordinator.tick(0)
    coordinator.tick(200)
    assert GROUP not in coordinator.groups


def test_a_write_completing_late_does_not_replace_a_newer_one() -> None:
    coordinator = GroupCoordinator(GroupConfig(num_partitions=1))
    older, newer, latest = (coordinator.commit_offsets("waiter", commit_request(n), 0).staged for n in (5, 9, 11))
    coordinator.offsets_written(newer, {0: 20})
    coordinator.offsets_written(older, {0: 10})  # its write was before the newer one's
    assert coordinator.fetch_offsets(GROUP, [(TP[0], [TP[1]])])[0][1][0][1].offset == 9
    assert coordinator.pending_partitions(GROUP) == {TP}  # the latest commit is still in flight
    coordinator.offsets_written(latest, {0: 30})
    assert coordinator.fetch_offsets(GROUP, [(TP[0], [TP[1]])])[0][1][0][1].offset == 11
    assert not coordinator.pending_partitions(GROUP)


def test_a_first_commit_being_written_survives_the_load_of_another_partition() -> None:
    """Each load used to drop every empty group without a committed offset, of any partition: a new group
    whose first commit was not replicated yet was lost, although the commit was then answered without error."""
    coordinator = GroupCoordinator(GroupConfig())
    out = coordinator.commit_offsets("waiter", commit_request(7), 0)
    coordinator.load([], 0)  # an empty partition of __consumer_offsets, another than the group's, is loaded
    coordinator.offsets_written(out.staged, {coordinator.partition_of(GROUP): 1})
    assert coordinator.fetch_offsets(GROUP, [(TP[0], [TP[1]])])[0][1][0][1].offset == 7
    assert coordinator.describe_group(GROUP, 5, False).group_state == "Empty"
