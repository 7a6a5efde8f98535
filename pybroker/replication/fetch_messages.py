"""Kafka's ReplicaManager.fetchMessages and its DelayedFetch, for consumers and followers.

`fetch_messages` reads each partition in order within the request's byte limit (the first
non-empty one may exceed it), up to the bound its reader may see: a follower to the log end, a
consumer to the high watermark or, read_committed, to the last stable offset, with the aborted
transactions between the fetch offset and the LSO (entries past the returned batches are
harmless: clients apply an entry only when they reach its first offset). The reads use the page
cache only, so a cold log never stalls the event loop: a range out of the cache is read into it on
an I/O thread and the reads start over. A follower's fetch offsets are recorded as its log end
offsets (they move the ISR and the high watermark). Until ``min_bytes`` are there, nothing failed
and ``max_wait_ms`` has not passed, the reads are done again after each append to one of the
partitions (the long poll); the last read is the answer.

A fetch that sends ``LastFetchedEpoch`` (v12+) is checked against the leader's epoch cache first
(Kafka's Partition.fetchRecords): when the fetcher's log diverged from the leader's, the partition
answers the diverging epoch and no records, and the fetch answers at once, as in Kafka.

Every failed read is kept as the exception of its partition; the caller turns it into an error code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine

from pybroker.common.io_executor import IoExecutor
from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.topic import TopicPartition
from pybroker.log.errors import ColdReadError, OffsetOutOfRangeError
from pybroker.log.file_slice import FileSlice
from pybroker.log.log import PartitionLog
from pybroker.replication.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET, EpochCache
from pybroker.replication.errors import ReplicationError
from pybroker.replication.manager import ReplicaManager

MAX_WARM_UPS = 8


@dataclass(slots=True)
class FetchPartition:
    """One partition as a fetch asks for it."""

    topic: str
    index: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    """A follower's own log start (its DeleteRecords progress); -1 from consumers."""
    last_fetched_epoch: int = -1
    """v12+: the epoch of the last batch the fetcher holds (KIP-320/KIP-595); -1 when not sent."""


@dataclass(slots=True, init=False)
class FetchParams:
    """What the whole fetch asks for (Kafka's FetchParams). Every fetch builds one, and this one and
    :class:`PartitionRead` are built with positional arguments: a keyword call to a class builds a dict on
    Python 3.11. The constructor is written out: a dataclass's ``__post_init__`` would be one more call."""

    replica_id: BrokerId
    """The fetching follower's broker id, or -1 for a consumer."""
    read_committed: bool
    min_bytes: int
    max_wait_ms: int
    byte_limit: int | Callable[[], int]
    """The bytes the fetch may return, or, under a quota, the function asked again at each read: a
    consumer's quota window moves during a long poll (a function built and called for every fetch otherwise)."""
    follower: bool
    """``replica_id >= 0``: a field rather than a property, as every read asks it."""

    def __init__(self, replica_id: BrokerId, read_committed: bool, min_bytes: int, max_wait_ms: int,
                 byte_limit: int | Callable[[], int]) -> None:
        self.replica_id = replica_id
        self.read_committed = read_committed
        self.min_bytes = min_bytes
        self.max_wait_ms = max_wait_ms
        self.byte_limit = byte_limit
        self.follower = replica_id >= 0


@dataclass(slots=True)
class PartitionRead:
    """One partition's read: its records (a file range the network layer splices into the answer),
    or ``error``."""

    error: Exception | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None
    """read_committed: the (producer id, first offset) of each aborted transaction in range."""
    records: bytes | FileSlice = b""
    diverging: tuple[int, int] | None = None
    """(epoch, end offset) where the fetcher's log left the leader's: no records then (`_diverging_epoch`)."""

    @property
    def size(self) -> int:
        records = self.records
        return records.size if isinstance(records, FileSlice) else len(records)


@dataclass(slots=True)
class FetchResult:
    """Each partition read, in request order, and their records' size."""

    reads: list[PartitionRead] = field(default_factory=list)
    bytes: int = 0
    has_error: bool = False


def fetch_messages(replicas: ReplicaManager, io: IoExecutor, params: FetchParams, partitions: list[FetchPartition],
                   *, answered_with_error: bool = False,
                   on_wait: Callable[[], None] = lambda: None) -> FetchResult | Coroutine[Any, Any, FetchResult]:
    """Read ``partitions``, record a follower's fetch, and long-poll when too little is there.

    As Kafka's fetchMessages, it answers at once when it can (usually: the reads find the page
    cache warm and enough data, or no wait is asked for), with the result; otherwise it returns the
    delayed fetch, a coroutine to await for the result (no coroutine on the common path: a small
    fetch's cost is mostly its fixed cost).

    ``answered_with_error``: another partition of the request is refused already (unknown topic,
    not authorized), so the fetch answers at once, as after a failed read. ``on_wait`` is called
    before each wait of the long poll (the request leaves the request queue)."""
    try:  # usually all in the page cache: read at once, on the loop
        result = _read_all(replicas, params, partitions, cached_only=True)
    except ColdReadError as cold:
        return _delayed_fetch(replicas, io, params, partitions, cold, answered_with_error, on_wait)
    if not params.follower and (result.bytes >= params.min_bytes or params.max_wait_ms <= 0):
        return result  # a consumer's fetch that has enough or asks for no wait: _after_read's answer, with no call
    return _after_read(replicas, io, params, partitions, result, answered_with_error, on_wait)


async def _delayed_fetch(replicas: ReplicaManager, io: IoExecutor, params: FetchParams,
                         partitions: list[FetchPartition], cold: ColdReadError, answered_with_error: bool,
                         on_wait: Callable[[], None]) -> FetchResult:
    """A fetch whose first read met a page out of the cache: warmed on an I/O thread, then as usual."""
    result = await _read_all_from_cache(replicas, io, params, partitions, cold)
    outcome = _after_read(replicas, io, params, partitions, result, answered_with_error, on_wait)
    return outcome if isinstance(outcome, FetchResult) else await outcome


def _after_read(replicas: ReplicaManager, io: IoExecutor, params: FetchParams, partitions: list[FetchPartition],
                result: FetchResult, answered_with_error: bool,
                on_wait: Callable[[], None]) -> FetchResult | Coroutine[Any, Any, FetchResult]:
    if params.follower:
        _record_follower_fetch(replicas, params.replica_id, partitions, result)
    if result.bytes < params.min_bytes and not result.has_error and not answered_with_error \
            and params.max_wait_ms > 0 and not _diverged(result):
        return _long_poll(replicas, io, params, partitions, result, on_wait)
    return result


async def _long_poll(replicas: ReplicaManager, io: IoExecutor, params: FetchParams, partitions: list[FetchPartition],
                     result: FetchResult, on_wait: Callable[[], None]) -> FetchResult:
    """Kafka's DelayedFetch: read again after each append to the partitions asked for, until
    min_bytes are there, a read fails or max_wait_ms has passed."""
    deadline = replicas.clock.monotonic() + params.max_wait_ms / 1000
    keys = [TopicPartition(p.topic, p.index) for p in partitions]
    while result.bytes < params.min_bytes and not result.has_error and keys and not _diverged(result):
        remaining = deadline - replicas.clock.monotonic()
        if remaining <= 0:
            break
        on_wait()
        await replicas.wait_for_append(keys, remaining)
        result = await _read_all_from_cache(replicas, io, params, partitions)
    return result


async def _read_all_from_cache(replicas: ReplicaManager, io: IoExecutor, params: FetchParams,
                               partitions: list[FetchPartition], cold: ColdReadError | None = None) -> FetchResult:
    """``_read_all`` with the page cache only: where a header walk meets a page out of the cache,
    that range is read into the cache on an I/O thread and the reads start over (the same range is
    then also warm for the sendfile of the answer). After ``MAX_WARM_UPS`` (the cache evicting as
    fast as we warm) the reads may block, to progress. ``cold``: the miss of a read the caller
    already tried, warmed first instead of read again."""
    for _ in range(MAX_WARM_UPS):
        if cold is None:
            try:
                return _read_all(replicas, params, partitions, cached_only=True)
            except ColdReadError as miss:
                cold = miss
        io.cold_reads["fetch"] += 1
        await io.run(cold.warm)
        cold = None
    return _read_all(replicas, params, partitions, cached_only=False)


def _read_all(replicas: ReplicaManager, params: FetchParams, partitions: list[FetchPartition], *,
              cached_only: bool) -> FetchResult:
    """Read each partition in order within the byte limit; the first non-empty one may exceed it.

    As in Kafka's ReplicaManager, the limit left shrinks by each partition's size but never below 0,
    so only a negative request max_bytes reaches the first partition's read (which rejects it).
    """
    result = FetchResult([], 0, False)
    limit = params.byte_limit if isinstance(params.byte_limit, int) else params.byte_limit()
    for wanted in partitions:
        try:
            read = _read_partition(replicas, params, wanted, limit, result.bytes == 0, cached_only)
        except ColdReadError:
            raise
        except Exception as exc:  # noqa: BLE001 - Kafka answers any failed read with unknown offsets (-1)
            read = PartitionRead(error=exc)
            result.has_error = True
        records = read.records  # PartitionRead.size, inline
        size = records.size if isinstance(records, FileSlice) else len(records)
        limit = max(limit - size, 0)
        result.bytes += size
        result.reads.append(read)
    return result


def _read_partition(replicas: ReplicaManager, params: FetchParams, wanted: FetchPartition, budget: int,
                    min_one_batch: bool, cached_only: bool) -> PartitionRead:
    partition = replicas.leader_partition(wanted.topic, wanted.index)
    partition.check_leader_epoch(wanted.current_leader_epoch)
    if params.follower:
        partition.check_follower(params.replica_id)
    log = partition.log
    if wanted.last_fetched_epoch >= 0:
        diverging = _diverging_epoch(partition.epoch_cache, log, wanted)
        if diverging is not None:
            return PartitionRead(None, log.high_watermark, log.last_stable_offset, log.log_start_offset, None, b"",
                                 diverging)
    read_committed = params.read_committed
    found, high_watermark, last_stable, log_start = log.read_for_fetch(
        wanted.fetch_offset, min(wanted.max_bytes, budget), params.follower, read_committed, min_one_batch,
        cached_only)
    if not read_committed:
        return PartitionRead(None, high_watermark, last_stable, log_start, None, b"" if found is None else found)
    if found is None:
        return PartitionRead(None, high_watermark, last_stable, log_start, [], b"")
    aborted = [(txn.producer_id, txn.first_offset) for txn in log.collect_aborted(wanted.fetch_offset, last_stable)]
    return PartitionRead(None, high_watermark, last_stable, log_start, aborted, found)


def _diverging_epoch(cache: EpochCache, log: PartitionLog, wanted: FetchPartition) -> tuple[int, int] | None:
    """Kafka's check of a fetch's ``LastFetchedEpoch``: the largest epoch at or below it on the leader and
    where it ends, when that epoch is older or ends before the fetch offset (the fetcher holds records the
    leader does not: it truncates to there); None when the fetcher's log is a prefix of the leader's. An epoch
    newer than any the leader has, or a fetch offset below the log start, is out of range."""
    entries = cache.entries
    if entries and entries[-1][0] == wanted.last_fetched_epoch \
            and log.log_start_offset <= wanted.fetch_offset <= log.log_end_offset:
        return None  # the usual case, without the lookup: the fetcher is in the latest epoch, within the log
    epoch, end_offset = cache.end_offset_for(wanted.last_fetched_epoch, log.log_end_offset)
    if end_offset == UNDEFINED_OFFSET or epoch == UNDEFINED_EPOCH or wanted.fetch_offset < log.log_start_offset:
        raise OffsetOutOfRangeError(wanted.fetch_offset, log.log_start_offset, log.log_end_offset)
    if epoch < wanted.last_fetched_epoch or end_offset < wanted.fetch_offset:
        return epoch, end_offset
    return None


def _diverged(result: FetchResult) -> bool:
    """Some partition answers a diverging epoch: the fetch answers at once (asked only before a wait)."""
    for read in result.reads:
        if read.diverging is not None:
            return True
    return False


def _record_follower_fetch(replicas: ReplicaManager, replica_id: BrokerId, partitions: list[FetchPartition],
                           result: FetchResult) -> None:
    """A follower's fetch offsets are its log end offsets: the leader's ISR and watermark use them.

    Only offsets the leader could read from count (Kafka's updateFollowerFetchState runs on the read
    result): an out-of-range, refused or diverging fetch says nothing about what the follower holds."""
    for wanted, read in zip(partitions, result.reads):
        if read.error is None and read.diverging is None:
            try:
                replicas.record_follower_fetch(wanted.topic, wanted.index, replica_id, wanted.fetch_offset,
                                               current_leader_epoch=LeaderEpoch(wanted.current_leader_epoch),
                                               log_start_offset=wanted.log_start_offset)
            except ReplicationError:  # not the leader (any more), or another epoch: the read reports it
                continue
