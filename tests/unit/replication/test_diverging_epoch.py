"""Fetch v12+ ``LastFetchedEpoch`` (KIP-320/KIP-595): the leader answers where the fetcher's log left its own,
checked against its epoch cache as Kafka's Partition.fetchRecords does. A real log and replica manager."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from pybroker.common.clock import SystemClock
from pybroker.common.io_executor import IoExecutor
from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.manager import LogManager
from pybroker.replication.append_records import PartitionAppend
from pybroker.replication.fetch_messages import FetchParams, FetchResult, fetch_messages
from pybroker.replication.manager import ReplicaManager
from tests.unit.replication.test_data_path import CONFIG, NOW, at, batch, fetch, produce, values


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    """Epoch 0 wrote offsets 0-2, epoch 2 (after a leader change) offsets 3-4; epoch 1 wrote nothing here."""
    logs = LogManager([str(tmp_path)], CONFIG)
    logs.startup(NOW)
    manager = ReplicaManager(logs, 0, SystemClock())
    for epoch, values_ in ((0, (b"a", b"b", b"c")), (2, (b"d", b"e"))):
        manager.become_leader("t", 0, uuid.UUID(int=1), leader_epoch=epoch, replicas=(0, 1), isr=(0,),
                              config=CONFIG, min_insync_replicas=1)
        (appended,) = produce(manager, PartitionAppend("t", 0, batch(*values_)))
        assert appended.error is None
    assert manager.leader_partition("t", 0).epoch_cache.entries == [(0, 0), (2, 3)]
    yield manager
    logs.shutdown()


def test_a_fetch_within_its_epoch_reads_as_before(replicas: ReplicaManager) -> None:
    # (whole batches: epoch 0's is offsets 0-2, epoch 2's 3-4); the end of its epoch is still within it
    for offset, epoch, expected in ((2, 0, [b"a", b"b", b"c", b"d", b"e"]), (3, 0, [b"d", b"e"]),
                                    (3, 2, [b"d", b"e"]), (5, 2, [])):
        result = fetch(replicas, at(offset, last_fetched_epoch=epoch))
        assert (result.reads[0].error, result.reads[0].diverging) == (None, None)
        assert values(result) == expected


def test_an_offset_past_the_end_of_its_epoch_diverges_with_no_records(replicas: ReplicaManager) -> None:
    read = fetch(replicas, at(4, last_fetched_epoch=0)).reads[0]
    assert read.error is None
    assert read.diverging == (0, 3)
    assert read.records == b""
    assert (read.high_watermark, read.last_stable_offset, read.log_start_offset) == (5, 5, 0)


def test_an_epoch_the_leader_never_had_diverges_at_the_largest_older_one(replicas: ReplicaManager) -> None:
    # the fetcher wrote in epoch 1 (an unclean leader this replica never followed): truncate to epoch 0's end
    assert fetch(replicas, at(3, last_fetched_epoch=1)).reads[0].diverging == (0, 3)
    assert fetch(replicas, at(2, last_fetched_epoch=1)).reads[0].diverging == (0, 3)


def test_an_epoch_newer_than_the_leaders_is_out_of_range(replicas: ReplicaManager) -> None:
    result = fetch(replicas, at(5, last_fetched_epoch=3))
    assert result.has_error and isinstance(result.reads[0].error, OffsetOutOfRangeError)


def test_a_diverging_fetch_answers_at_once_and_does_not_move_the_followers_offset(replicas: ReplicaManager) -> None:
    async def run() -> object:
        io = IoExecutor(1)
        try:
            params = FetchParams(1, False, 1, 60_000, lambda: 1 << 20)  # a follower that would long-poll
            return fetch_messages(replicas, io, params, [at(5, last_fetched_epoch=1)])
        finally:
            io.shutdown()

    outcome = asyncio.run(run())
    assert isinstance(outcome, FetchResult), "a diverging partition must not wait in the long poll"
    assert outcome.reads[0].diverging == (0, 3)
    assert replicas.leader_partition("t", 0).followers[1].log_end_offset == -1
