"""A share-partition's read of its log: whole batches from the share-partition's fetch offset, acquired for a member.

The records are served as Fetch serves them, a file range of whole batches spliced into the response; only the
batch headers are read in Python, for the offsets acquisition needs. The range sent is trimmed to the batches that
hold acquired offsets (the client delivers only the acquired ones, as with Kafka, which sends whole batches too).

With ``share.isolation.level=read_committed`` the read stops at the last stable offset, and the batches of aborted
transactions are archived as control batches are, never delivered (Kafka's SharePartition archives them too).
"""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.common.io_executor import IoExecutor
from pybroker.log import PartitionLog
from pybroker.log.compactor import AbortedTxns
from pybroker.log.errors import ColdReadError
from pybroker.log.file_slice import FileSlice
from pybroker.records.batch import iter_batches
from pybroker.replication.share.partition import Acquired, BatchBounds, SharePartition

__all__ = ["ShareRead", "acquire_from_log"]


@dataclass(slots=True)
class ShareRead:
    records: FileSlice | bytes
    acquired: list[Acquired]


async def acquire_from_log(log: PartitionLog, io: IoExecutor, share: SharePartition, member_id: str, *,
                           max_bytes: int, max_records: int, lock_ms: int, now_ms: int,
                           record_limit: bool = False, read_committed: bool = False) -> ShareRead:
    """Read up to ``max_bytes`` (at least one batch) from ``share.fetch_offset()`` below the high watermark (the
    last stable offset when ``read_committed``) and acquire what ``share`` lets ``member_id`` take; nothing when no
    record is available or may be acquired."""
    share.expire(now_ms)
    share.skip_to(log.log_start_offset)
    if not share.has_available() and not share.can_acquire_new():
        return ShareRead(b"", [])
    offset = share.fetch_offset()
    bound = log.last_stable_offset if read_committed else log.high_watermark
    if offset >= bound:
        return ShareRead(b"", [])
    try:
        info = log.read(offset, max_bytes, max_offset=bound, cached_only=True)
    except ColdReadError as cold:
        await io.run(cold.warm)
        info = log.read(offset, max_bytes, max_offset=bound)
    if info.slices is None:
        return ShareRead(b"", [])
    found = info.slices
    data = found.read_cached()
    if data is None:
        data = await io.run(found.detached_read())
    aborted = AbortedTxns(log.collect_aborted(offset, bound)) if read_committed else None
    positions: list[tuple[int, int, BatchBounds]] = []
    for batch in iter_batches(data):
        archived = batch.is_control or (aborted is not None and batch.is_transactional
                                        and aborted.covers(batch.producer_id, batch.base_offset))
        positions.append((batch.position, batch.position + batch.size,
                          BatchBounds(batch.base_offset, batch.last_offset, archived)))
    acquired = share.acquire(member_id, [bounds for _, _, bounds in positions], max_records=max_records,
                             lock_ms=lock_ms, now_ms=now_ms, record_limit=record_limit)
    if not acquired:
        return ShareRead(b"", [])
    holding = [(start, end) for start, end, bounds in positions
               if any(a.first <= bounds.last and bounds.first <= a.last for a in acquired)]
    start, end = holding[0][0], holding[-1][1]
    return ShareRead(found.after(start).first(end - start), acquired)
