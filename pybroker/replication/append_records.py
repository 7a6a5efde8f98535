"""Kafka's ReplicaManager.appendRecords for producers, and its DelayedProduce.

`append_records` takes a Produce request's batches as plain values and, per partition: refuses
what Kafka's appendToLocalLog refuses (acks other than 0, 1 and -1, a client writing to an internal
topic, a partition not led here), checks the batch as Kafka's LogValidator does (framing and
max.message.bytes, then CRC, exactly one batch, zstd only from Produce v7, a transactional batch
only with a transactional id, then the records at byte level: no Record objects), runs the
caller's own checks (`BeforeAppend`: schema validation, the transaction verification), sets the
batch's max timestamp to the records' own and appends it. With flush.messages it then waits until
the appended offsets are on disk (Kafka's synchronous flush, done off the loop).

A batch of more than OFF_LOOP_RECORDS records, or whose records (decompressed) pass its codec's
`loop_budget`, is checked on an I/O thread instead: a 1 MB lz4 batch can hold 64 MiB of records, tens
of milliseconds during which no other client would be served. Its partition's later appends wait
behind it (`AppendQueue`), so they keep the order the requests arrived in.

`wait_for_acks` is the delayed produce of acks=all: the partitions whose ISR already holds their
batch answer at once, the others wait for their high watermark (or the request's timeout).

Every failure is kept as the exception of its partition; the caller turns it into an error code.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable

from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import INTERNAL_TOPICS, TopicPartition
from pybroker.log.errors import LogStorageError
from pybroker.log.log import AppendInfo
from pybroker.records.batch import BatchHeader, Compression, RecordBatch, TimestampType, set_max_timestamp, \
    validate_batch
from pybroker.records.constants import COMPRESSION_CODEC_MASK, LOG_OVERHEAD, TRANSACTIONAL_FLAG_MASK
from pybroker.records.errors import InvalidRecordError, UnsupportedCompressionError
from pybroker.records.validation import COMPILED_WALK, OverBudget, ProducePolicy, validate_produced_batch
from pybroker.replication.errors import InternalTopicError, InvalidRequiredAcksError, TransactionalIdRequiredError
from pybroker.replication.manager import ReplicaManager
from pybroker.replication.partition import Partition

BeforeAppend = Callable[[str, int, RecordBatch, BatchHeader], None]
"""The caller's checks of a valid batch before it is appended ``(topic, partition, batch, header)``:
raising refuses that partition's batch with the exception."""

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

SLOW_CODECS = frozenset((Compression.GZIP, Compression.ZSTD))
"""Codecs given a quarter of OFF_LOOP_BYTES: zlib took 0.4-16 ms and zstd 0.4-6 ms to decompress 1 MiB of
records here (lz4 and snappy at most 0.45 ms), each under 1 ms for 256 KiB."""


def loop_budget(header: BatchHeader) -> int:
    """The records bytes (decompressed) up to which the batch is checked on the event loop: 0 for a batch
    whose records count alone sends it to an I/O thread."""
    if header.records_count > OFF_LOOP_RECORDS:
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


async def append_records(replicas: ReplicaManager, batches: Iterable[PartitionAppend], *, required_acks: int,
                         transactional_id: str | None, allow_zstd: bool, now_ms: int,
                         before_append: BeforeAppend | None = None,
                         appended: AppendedStats | None = None, io: IoExecutor | None = None) -> list[PartitionAppend]:
    """Append each partition's batch as leader, then wait for flush.messages; the outcomes in order.
    With ``io``, a big batch is checked on its threads (without it, on the caller's thread)."""
    results = []
    later: list[Awaitable[None]] = []
    queue = replicas.append_queue
    for item in batches:
        try:
            partition, batch, header = _check(replicas, item, required_acks, transactional_id, allow_zstd)
            policy = partition.log.config.produce_policy
            name = f"{item.topic}-{item.index}"
            if io is None:  # no loop to keep free
                max_timestamp = validate_produced_batch(batch, policy, now_ms, name, header)
                item.info = _append(replicas, item, partition, batch, header, max_timestamp, required_acks, now_ms,
                                    before_append, appended)
                results.append(item)
                continue
            try:  # checked: the max timestamp, or None when the records are left to an I/O thread
                checked: int | None = validate_produced_batch(batch, policy, now_ms, name, header,
                                                              loop_budget(header))
            except OverBudget:
                checked = None
            if checked is not None and not queue.busy(item.topic, item.index):
                item.info = _append(replicas, item, partition, batch, header, checked, required_acks, now_ms,
                                    before_append, appended)
            else:
                previous, turn = queue.join(item.topic, item.index)
                later.append(_append_in_turn(replicas, io, item, batch, header, policy, checked, previous, turn,
                                             required_acks, now_ms, before_append, appended))
        except Exception as exc:  # noqa: BLE001 - the partition's answer; the caller maps it to its code
            item.error = exc
        results.append(item)
    if later:
        await asyncio.gather(*later)
    if replicas.log_manager.flushing:
        unflushed = await replicas.log_manager.wait_flushed(
            TopicPartition(item.topic, item.index) for item in results if item.error is None)
        for item in results:
            if (item.topic, item.index) in unflushed:  # still awaits its acks: their failure would answer
                item.error = LogStorageError(f"Flush of {item.topic}-{item.index} failed")
    return results


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


def _append(replicas: ReplicaManager, item: PartitionAppend, partition: Partition, batch: RecordBatch,
            header: BatchHeader, max_timestamp: int, required_acks: int, now_ms: int,
            before_append: BeforeAppend | None, appended: AppendedStats | None) -> AppendInfo:
    if before_append is not None:
        before_append(item.topic, item.index, batch, header)
    stamped = bytearray(batch.buffer)
    if not partition.log.config.log_append_time:  # Kafka's setMaxTimestamp: the records', not the producer's claim
        set_max_timestamp(stamped, 0, TimestampType.CREATE_TIME, max_timestamp)
    info = replicas.append_to(partition, stamped, required_acks=required_acks, now_ms=now_ms)
    if appended is not None:
        appended(item.topic, len(stamped), header.records_count)
    return info


async def _append_in_turn(replicas: ReplicaManager, io: IoExecutor, item: PartitionAppend, batch: RecordBatch,
                          header: BatchHeader, policy: ProducePolicy, max_timestamp: int | None,
                          previous: asyncio.Future[None] | None,
                          turn: asyncio.Future[None], required_acks: int, now_ms: int,
                          before_append: BeforeAppend | None, appended: AppendedStats | None) -> None:
    """Check the batch's records on an I/O thread unless done already (``max_timestamp``), then append it
    once the appends to its partition that arrived before it are done."""
    queue = replicas.append_queue
    try:
        if max_timestamp is None:
            async with queue.checks(io.threads):
                max_timestamp = await io.run(functools.partial(
                    validate_produced_batch, batch, policy, now_ms, f"{item.topic}-{item.index}", header, -1,
                    _let_loop_in))
        if previous is not None:
            await asyncio.shield(previous)  # the turn before is not this request's to cancel
        # Looked up again: the partition may have changed hands (or been deleted) while its batch was checked.
        partition = replicas.leader_partition(item.topic, item.index)
        item.info = _append(replicas, item, partition, batch, header, max_timestamp, required_acks, now_ms,
                            before_append, appended)
    except Exception as exc:  # noqa: BLE001 - the partition's answer; the caller maps it to its code
        item.error = exc
    finally:
        queue.leave(item.topic, item.index, previous, turn)


def _let_loop_in() -> None:
    """Let go of the GIL for a moment: one the event loop's thread asked for is then handed to it."""
    time.sleep(0)


async def wait_for_acks(replicas: ReplicaManager, results: list[PartitionAppend], timeout_ms: int,
                        on_wait: Callable[[], None] = lambda: None) -> None:
    """acks=all: hold until the ISR has every appended batch (Kafka's delayed produce), or the timeout;
    a partition that cannot be acknowledged gets its replication error. Partitions already replicated
    (a single replica, or followers ahead) need no wait, as Kafka's delayed produce completes at once
    when it can. ``on_wait`` is called before waiting (the request leaves the request queue)."""
    waiting: list[PartitionAppend] = []
    for item in results:
        if item.info is None:
            continue
        try:
            if not replicas.replicated(item.topic, item.index, item.info.last_offset + 1):
                waiting.append(item)
        except Exception as exc:  # noqa: BLE001 - answered as that partition's error, as after a wait
            item.error = exc
    if not waiting:
        return
    on_wait()
    outcomes = await asyncio.gather(*(
        replicas.wait_for_high_watermark(item.topic, item.index, item.info.last_offset + 1, timeout_ms / 1000)
        for item in waiting if item.info is not None), return_exceptions=True)
    for item, outcome in zip(waiting, outcomes):
        if isinstance(outcome, Exception):
            item.error = outcome
