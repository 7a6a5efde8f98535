"""A share-partition's log read (``replication/share/reader.py``) is bounded by what can be acquired, not by the
backlog: a ShareFetch for 10 records on a 5,000-batch queue reads about 10 batches, however large ``max_bytes``.
The reads are counted on the real log (bytes and batches of each ``read``), not timed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pybroker.common.io_executor import IoExecutor
from pybroker.log import FetchInfo, LogConfig, PartitionLog
from pybroker.records.batch import iter_batches
from pybroker.replication.share.partition import SharePartition
from pybroker.replication.share.reader import ShareRead, acquirable_end, acquire_from_log

from tests.unit.log.logtest_util import NOW, batch, open_log

BACKLOG = 5_000
FETCH_MAX_BYTES = 50 * 1024 * 1024


class CountingLog:
    """The real log, with the bytes and batches each ``read`` returned written down."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.bytes_read = 0
        self.batches_read = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.log, name)

    def read(self, offset: int, max_bytes: int, **kwargs: object) -> FetchInfo:
        info = self.log.read(offset, max_bytes, **kwargs)  # type: ignore[arg-type]
        if info.slices is not None:
            data = info.slices.read()
            self.bytes_read += len(data)
            self.batches_read += sum(1 for _ in iter_batches(data))
        return info


def _queue(tmp_path: Path, batch_records: int = 1) -> CountingLog:
    log = open_log(tmp_path, LogConfig(segment_bytes=64 * 1024 * 1024, retention_ms=-1))
    for _ in range(BACKLOG // batch_records):
        log.append_as_leader(batch(batch_records), leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset
    return CountingLog(log)


def _fetch(log: CountingLog, share: SharePartition, max_records: int, now_ms: int = NOW) -> ShareRead:
    async def scenario() -> ShareRead:
        io = IoExecutor(1)
        try:
            return await acquire_from_log(log, io, share, "m", max_bytes=FETCH_MAX_BYTES,  # type: ignore[arg-type]
                                          max_records=max_records, lock_ms=30_000, now_ms=now_ms)
        finally:
            io.shutdown()
    return asyncio.run(scenario())


def test_a_fetch_reads_what_it_can_acquire_not_the_backlog(tmp_path: Path) -> None:
    log = _queue(tmp_path)
    share = SharePartition(0, delivery_count_limit=5, max_record_locks=2_000)
    read = _fetch(log, share, max_records=10)
    assert [(a.first, a.last) for a in read.acquired] == [(0, 9)]
    assert log.batches_read == 10 and log.bytes_read < 10 * 200
    log.batches_read = 0
    read = _fetch(log, share, max_records=10)
    assert [(a.first, a.last) for a in read.acquired] == [(10, 19)] and log.batches_read == 10


def test_the_record_lock_cap_bounds_the_read_and_released_records_are_read_again(tmp_path: Path) -> None:
    log = _queue(tmp_path)
    share = SharePartition(0, delivery_count_limit=5, max_record_locks=30)
    assert [(a.first, a.last) for a in _fetch(log, share, max_records=25).acquired] == [(0, 24)]
    log.batches_read = 0
    assert [(a.first, a.last) for a in _fetch(log, share, max_records=25).acquired] == [(25, 29)]
    assert log.batches_read == 5 and acquirable_end(share, 25) == 30
    share.release_member("m")
    assert _fetch(log, share, max_records=25).acquired == []  # released, not written yet
    share.written(share.changes)
    log.batches_read = 0
    assert [(a.first, a.last) for a in _fetch(log, share, max_records=25).acquired] == [(0, 24)]
    assert log.batches_read == 30  # the in-flight window, nothing past the cap


def test_a_batch_larger_than_the_bound_is_still_acquired_whole(tmp_path: Path) -> None:
    log = _queue(tmp_path, batch_records=100)
    share = SharePartition(0, delivery_count_limit=5, max_record_locks=2_000)
    read = _fetch(log, share, max_records=10)
    assert [(a.first, a.last) for a in read.acquired] == [(0, 99)] and log.batches_read == 1
