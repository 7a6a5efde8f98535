"""Kafka's ReplicaManager.appendRecords for producers, and its DelayedProduce.

`append_records` takes a Produce request's batches as plain values and, per partition: refuses
what Kafka's appendToLocalLog refuses (acks other than 0, 1 and -1, a client writing to an internal
topic, a partition not led here), checks the batch as Kafka's LogValidator does (framing and
max.message.bytes, then CRC, exactly one batch, zstd only from Produce v7, a transactional batch
only with a transactional id, then the records at byte level: no Record objects), runs the
caller's own check (`BeforeAppend`: schema validation), sets the batch's max timestamp to the records'
own and appends it. With flush.messages it then waits until
the appended offsets are on disk (Kafka's synchronous flush, done off the loop).

A batch of more than OFF_LOOP_RECORDS records, or whose records (decompressed) pass its codec's
`loop_budget`, is checked on an I/O thread instead: a 1 MB lz4 batch can hold 64 MiB of records, tens
of milliseconds during which no other client would be served. The thread also runs the caller's reading
of the records (`RecordsCheck`: a partition with one sends batches of more than CALLER_CHECK_RECORDS
there) and makes the stamped copy that is appended; the loop hears the caller's verdict and appends.
Its partition's later appends wait behind it (`AppendQueue`), so they keep the order the requests
arrived in.

`unreplicated` and `wait_for_acks` are the delayed produce of acks=all: the partitions whose ISR already
holds their batch answer at once, the others wait for their high watermark (or the request's timeout).

Every failure is kept as the exception of its partition; the caller turns it into an error code.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine, Iterable

from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import INTERNAL_TOPICS, TopicPartition
from pybroker.log.errors import LogStorageError
from pybroker.log.results import AppendInfo
from pybroker.records.batch import BatchHeader, Compression, RecordBatch, TimestampType, set_max_timestamp, \
    validate_batch
from pybroker.records.constants import COMPRESSION_CODEC_MASK, LOG_OVERHEAD, TIMESTAMP_TYPE_MASK, \
    TRANSACTIONAL_FLAG_MASK
from pybroker.records.errors import InvalidRecordError, UnsupportedCompressionError
from pybroker.records.validation import COMPILED_WALK, OverBudget, ProducePolicy, validate_produced_batch
from pybroker.replication.errors import InternalTopicError, InvalidRequiredAcksError, TransactionalIdRequiredError
from pybroker.replication.manager import ReplicaManager
from pybroker.replication.partition import Partition

Verdict = Callable[[], None]
"""Called on the loop just before the append: raising refuses the partition's batch with the exception."""
RecordsCheck = Callable[[RecordBatch], Verdict]
"""The caller's reading of a valid batch's records: run on the thread that checks them (the loop's for a small
batch, an I/O thread's for a big one), so it may read only the batch; what needs the loop's state is left to
the verdict it returns."""
BeforeAppend = Callable[[str, int], "RecordsCheck | None"]
"""The caller's own check of a partition's batches ``(topic, partition)``, or None when it has none."""

AppendedStats = Callable[[str, int, int], None]
"""Told of each append ``(topic, bytes, records)``: Kafka's BytesInPerSec and MessagesInPerSec."""

OFF_LOOP_RECORDS = 16_384 if COMPILED_WALK else 1_024
"""Records a batch checked on the loop holds at most (its header says how many, so a batch of more goes to an
I/O thread before anything is decompressed). Measured here: the compiled walk takes 0.6-0.75 ms for 16,384
one-byte records; the pure build 0.2 ms for 1,024 with numpy's walk, 0.65 ms without numpy."""

OFF_LOOP_BYTES = 1 << 20 if COMPILED_WALK else 128 << 10
"""Records (decompressed) checked on the loop at most, for lz4, snappy and uncompressed batches: a compressed
batch is decompressed on the loop up to this many bytes only, then handed to an I/O thread. The hand-off is
dear: for W1's batches (100-byte records, librdkafka's batch.size of 1 MiB) it cost the broker 100-400 us of
CPU per batch here (tasks and futures, the GIL passed back and forth, the loop woken from epoll, buffers kept
alive across the wait so that the next request's is freshly mapped and page-faulted), more than the check
itself: 1 MiB of 100-byte records takes the compiled build 0.3-0.45 ms uncompressed or lz4 (1.3 ms at worst
on a loaded machine), 128 KiB the pure build 0.3 ms with numpy, 1.1 ms without. A 40 MiB batch took
60-125 ms: that one goes to the thread."""

CALLER_CHECK_RECORDS = 256 if COMPILED_WALK else 128
"""Records a batch whose partition has a caller's check (schema validation, which decodes every record) holds
at most to be checked on the loop: more, and the batch goes to an I/O thread with its records check. Schema
validation read 256 records of 100 bytes in 0.42-0.49 ms here compiled (1,024 in 1.8-4.5 ms), 128 in about
0.5 ms pure (256 in 0.9-2 ms)."""

_CREATE_TIME = int(TimestampType.CREATE_TIME)  # read once: each read of an Enum member costs a slot call

SLOW_CODECS = frozenset((Compression.GZIP, Compression.ZSTD))
"""Codecs given a quarter of OFF_LOOP_BYTES: zlib took 0.4-16 ms and zstd 0.4-6 ms to decompress 1 MiB of
records here (lz4 and snappy at most 0.45 ms), each under 1 ms for 256 KiB."""


def loop_budget(header: BatchHeader, caller_check: bool = False) -> int:
    """The records bytes (decompressed) up to which the batch is checked on the event loop: 0 for a batch
    whose records count alone sends it to an I/O thread (``caller_check``: a `RecordsCheck` reads them too)."""
    if header.records_count > (CALLER_CHECK_RECORDS if caller_check else OFF_LOOP_RECORDS):
        return 0
    if header.attributes & COMPRESSION_CODEC_MASK in SLOW_CODECS:
        return OFF_LOOP_BYTES // 4
    return OFF_LOOP_BYTES


@dataclass(slots=True)
class PartitionAppend:
    """One partition's batch, and what became of it: ``info`` once appended; ``error`` when it was
    refused, or when it was appended but cannot be acknowledged (flush, replication)."""

    topic: str
    index: int
    records: bytes | bytearray | memoryview | None  # a decoded request's bytes, not copied
    info: AppendInfo | None = None
    error: Exception | None = None


def append_records(replicas: ReplicaManager, batches: Iterable[PartitionAppend], *, required_acks: int,
                   transactional_id: str | None, allow_zstd: bool, now_ms: int,
                   before_append: BeforeAppend | None = None, appended: AppendedStats | None = None,
                   io: IoExecutor | None = None) -> list[PartitionAppend] | Coroutine[Any, Any, list[PartitionAppend]]:
    """Append each partition's batch as leader, then wait for flush.messages; the outcomes in order. They are
    returned at once when nothing waits (every batch appended here, no flush.messages), as for most requests,
    else a coroutine returns them once the batches checked off the loop (or queued behind one) are appended and
    flushed: the caller makes no coroutine for a request that does not wait. Either way every batch that could
    be appended here is, before this returns, so the appends keep the order of the calls.
    With ``io``, a big batch is checked on its threads (without it, on the caller's thread)."""
    results = []
    later: list[Awaitable[None]] = []
    queue = replicas.append_queue
    for item in batches:
        try:
            partition, batch, header = _check(replicas, item, required_acks, transactional_id, allow_zstd)
            policy = partition.log.config.produce_policy
            name = f"{item.topic}-{item.index}"
            records_check = before_append(item.topic, item.index) if before_append is not None else None
            if io is None:  # no loop to keep free
                ready = _checked(batch, header, policy, now_ms, name, records_check)
                item.info = _append(replicas, item, partition, ready, required_acks, now_ms, appended)
                results.append(item)
                continue
            try:  # on the loop within its budget, else the whole check is left to an I/O thread
                max_timestamp = validate_produced_batch(batch, policy, now_ms, name, header,
                                                        loop_budget(header, records_check is not None))
            except OverBudget:
                previous, turn = queue.join(item.topic, item.index)
                later.append(_append_in_turn(replicas, io, item, functools.partial(
                    _checked, batch, header, policy, now_ms, name, records_check, _let_loop_in), previous, turn,
                    required_acks, now_ms, appended))
            else:
                ready = _stamped(batch, header, policy, max_timestamp, records_check)
                if queue.busy(item.topic, item.index):
                    previous, turn = queue.join(item.topic, item.index)
                    later.append(_append_in_turn(replicas, io, item, ready, previous, turn, required_acks, now_ms,
                                                 appended))
                else:
                    item.info = _append(replicas, item, partition, ready, required_acks, now_ms, appended)
        except Exception as exc:  # noqa: BLE001 - the partition's answer; the caller maps it to its code
            item.error = exc
        results.append(item)
    if later or replicas.log_manager.flushing:
        return _finish(replicas, results, later)
    return results


async def _finish(replicas: ReplicaManager, results: list[PartitionAppend], later: list[Awaitable[None]]
                  ) -> list[PartitionAppend]:
    """The appends that wait their turn (`later`), then flush.messages' wait."""
    if len(later) == 1:  # the usual big request: one batch, awaited without a task
        await later[0]
    elif later:
        await asyncio.gather(*later)
    if replicas.log_manager.flushing:
        unflushed = await replicas.log_manager.wait_flushed(
            TopicPartition(item.topic, item.index) for item in results if item.error is None)
        for item in results:
            if (item.topic, item.index) in unflushed:  # still awaits its acks: their failure would answer
                item.error = LogStorageError(f"Flush of {item.topic}-{item.index} failed")
    return results


@dataclass(slots=True)
class _Ready:
    """A checked batch, copied with its max timestamp set, and the caller's verdict still to hear on the loop."""

    stamped: bytearray
    header: BatchHeader  # the stamped copy's
    verdict: Verdict | None


def _checked(batch: RecordBatch, header: BatchHeader, policy: ProducePolicy, now_ms: int, name: str,
             records_check: RecordsCheck | None, pause: Callable[[], None] | None = None) -> _Ready:
    """The whole check of a batch's records, on whichever thread runs it: LogValidator's, the caller's, and
    the copy that is appended."""
    max_timestamp = validate_produced_batch(batch, policy, now_ms, name, header, -1, pause)
    return _stamped(batch, header, policy, max_timestamp, records_check)


def _stamped(batch: RecordBatch, header: BatchHeader, policy: ProducePolicy, max_timestamp: int,
             records_check: RecordsCheck | None) -> _Ready:
    verdict = records_check(batch) if records_check is not None else None
    stamped = bytearray(batch.buffer)
    # Kafka's setMaxTimestamp (the records', not the producer's claim), when it changes the batch: the header
    # says whether it would (usually not: a producer writes its records' maximum, with the CreateTime bit)
    if not policy.log_append_time and (header.max_timestamp != max_timestamp
                                       or header.attributes & TIMESTAMP_TYPE_MASK):
        set_max_timestamp(stamped, 0, _CREATE_TIME, max_timestamp)
        header = RecordBatch(stamped).header()
    return _Ready(stamped, header, verdict)


def _check(replicas: ReplicaManager, item: PartitionAppend, required_acks: int, transactional_id: str | None,
           allow_zstd: bool) -> tuple[Partition, RecordBatch, BatchHeader]:
    """The checks before the records' (Kafka's appendToLocalLog, then LogValidator's of the batch's framing)."""
    if required_acks not in (0, 1, -1):
        raise InvalidRequiredAcksError()
    if item.topic in INTERNAL_TOPICS:  # Kafka's appendToLocalLog for clients: only coordinators write these
        raise InternalTopicError(f"Cannot append to internal topic {item.topic}")
    partition = replicas.leader_partition(item.topic, item.index)
    records = item.records
    if records is None or len(records) == 0:
        raise InvalidRecordError("Produce request's partition data carries no record batch")
    batch = validate_batch(records, 0, max_size=partition.log.config.max_message_bytes, check_counts=False)
    header = batch.header()  # one unpack for every field read below
    if header.batch_length + LOG_OVERHEAD != len(records):
        raise InvalidRecordError("Produce requests v3+ must carry exactly one record batch per partition")
    if header.attributes & COMPRESSION_CODEC_MASK == Compression.ZSTD and not allow_zstd:
        raise UnsupportedCompressionError("zstd compression needs Produce v7 or later")
    if header.attributes & TRANSACTIONAL_FLAG_MASK and transactional_id is None:
        raise TransactionalIdRequiredError()
    return partition, batch, header


def _append(replicas: ReplicaManager, item: PartitionAppend, partition: Partition, ready: _Ready,
            required_acks: int, now_ms: int, appended: AppendedStats | None) -> AppendInfo:
    if ready.verdict is not None:
        ready.verdict()
    info = replicas.append_to(partition, ready.stamped, required_acks=required_acks, now_ms=now_ms,
                              header=ready.header)
    if appended is not None:
        appended(item.topic, len(ready.stamped), ready.header.records_count)
    return info


async def _append_in_turn(replicas: ReplicaManager, io: IoExecutor, item: PartitionAppend,
                          check: _Ready | Callable[[], _Ready], previous: asyncio.Future[None] | None,
                          turn: asyncio.Future[None], required_acks: int, now_ms: int,
                          appended: AppendedStats | None) -> None:
    """Check the batch on an I/O thread unless done already, then append it once the appends to its partition
    that arrived before it are done."""
    try:
        ready = check if isinstance(check, _Ready) else await io.check(check)
        if previous is not None and not previous.done():
            await asyncio.shield(previous)  # the turn before is not this request's to cancel
        # Looked up again: the partition may have changed hands (or been deleted) while its batch was checked.
        partition = replicas.leader_partition(item.topic, item.index)
        item.info = _append(replicas, item, partition, ready, required_acks, now_ms, appended)
    except Exception as exc:  # noqa: BLE001 - the partition's answer; the caller maps it to its code
        item.error = exc
    finally:
        replicas.append_queue.leave(item.topic, item.index, previous, turn)


def _let_loop_in() -> None:
    """Let go of the GIL for a moment: one the event loop's thread asked for is then handed to it."""
    time.sleep(0)


def unreplicated(replicas: ReplicaManager, results: list[PartitionAppend]) -> list[PartitionAppend]:
    """acks=all: the appended partitions whose ISR does not hold their batch yet; one that cannot be
    acknowledged gets its replication error. A caller that finds none (a single replica, or followers ahead)
    answers without `wait_for_acks`, a coroutine it would otherwise build and run for every request."""
    waiting: list[PartitionAppend] = []
    for item in results:
        if item.info is None:
            continue
        try:
            if not replicas.replicated(item.topic, item.index, item.info.last_offset + 1):
                waiting.append(item)
        except Exception as exc:  # noqa: BLE001 - answered as that partition's error, as after a wait
            item.error = exc
    return waiting


async def wait_for_acks(replicas: ReplicaManager, waiting: list[PartitionAppend], timeout_ms: int,
                        on_wait: Callable[[], None] = lambda: None) -> None:
    """acks=all: hold the partitions `unreplicated` found until the ISR has their batches (Kafka's delayed
    produce), or the timeout; a partition that cannot be acknowledged gets its replication error. ``on_wait``
    is called before waiting (the request leaves the request queue)."""
    on_wait()
    outcomes = await asyncio.gather(*(
        replicas.wait_for_high_watermark(item.topic, item.index, item.info.last_offset + 1, timeout_ms / 1000)
        for item in waiting if item.info is not None), return_exceptions=True)
    for item, outcome in zip(waiting, outcomes):
        if isinstance(outcome, Exception):
            item.error = outcome
