"""A leaving member's release is written with its undo (``ShareService.member_left``): when the write fails, the
records are held by the member again, count and lock as before, as Kafka's rollbackOrProcessStateUpdates rolls a
releaseAcquiredRecords back; records the release archived at the delivery count limit count as archived only once
the write is taken.

Driven through ``member_left`` on a share service reduced to what releasing uses (its session cache, one
share-partition and its real ``StateWriter``), with a coordinator answering the release's write."""

from __future__ import annotations

import asyncio
import uuid

from pybroker.common.clock import ManualClock
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.share.durable import DurableBatch, StateWriter
from pybroker.replication.share.partition import Acquired, BatchBounds, RecordState, SharePartition
from pybroker.server.share_service import ShareService, _Durable
from pybroker.server.share_sessions import ShareSessionCache

KEY = ("g", "t", 0)
LOCK_MS = 30_000


def _service(share: SharePartition, answer: ErrorCode) -> ShareService:
    """A share service holding ``share`` alone, whose state writes are answered ``answer``."""
    async def write(_start: int, _batches: list[DurableBatch]) -> ErrorCode:
        return answer
    service = ShareService.__new__(ShareService)
    service.sessions = ShareSessionCache(10)
    service.partitions = {KEY: share}
    service._durable = {KEY: _Durable(uuid.uuid4(), 0, 0, StateWriter(share, write))}
    service._loading = {}
    service._background = set()
    return service


async def _member_left(answer: ErrorCode) -> tuple[SharePartition, int]:
    """m1 holds 0-8 at the delivery count limit (1) and leaves; the release's write is answered ``answer``. The
    share-partition, and when m1's lock of 0-8 runs out."""
    share = SharePartition(0, delivery_count_limit=1, max_record_locks=100)
    assert share.acquire("m1", [BatchBounds(0, 8)], max_records=100, lock_ms=LOCK_MS,
                         now_ms=ManualClock().wall_ms()) == [Acquired(0, 8, 1)]
    lock = share.held_copy(0, 0)[0].deadline_ms
    service = _service(share, answer)
    service.member_left("g", "m1")
    assert share.state_of(0) == (RecordState.ARCHIVED, 1) and share.counters.archived == 0
    await asyncio.gather(*service._background)
    return share, lock


def test_a_release_whose_write_fails_is_held_by_the_member_again() -> None:
    """Before, the release had no undo: the archiving stood and the start offset moved past 0-8 once the write ended
    (seen so before the fix), though the coordinator never stored it."""
    share, lock = asyncio.run(_member_left(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    assert share.state_of(0) == (RecordState.ACQUIRED, 1) and share.acquired_by("m1") == 9
    assert share.held_copy(0, 8)[0].deadline_ms == lock and share.start_offset == 0
    assert share.counters.archived == 0


def test_a_release_s_archiving_counts_once_its_write_is_taken() -> None:
    share, _lock = asyncio.run(_member_left(ErrorCode.NONE))
    assert share.start_offset == 9 and share.counters.archived == 9
