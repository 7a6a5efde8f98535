"""Executor-side reading of one planned offset range into Arrow batches.

Like Spark's executors, this only assigns the partition and seeks: no consumer group, no commits
(`enable.auto.commit=false`), and `auto.offset.reset=error` so a range that fell below the log start is
noticed instead of silently reset.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Iterator

import pyarrow as pa
from confluent_kafka import (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException,
                             Message, TopicPartition)
from pyspark.sql.pandas.types import to_arrow_schema

from pybroker.spark_jobs.kafka_source.offsets import STALE_METADATA
from pybroker.spark_jobs.kafka_source.options import SourceOptions
from pybroker.spark_jobs.kafka_source.ranges import OffsetRange
from pybroker.spark_jobs.kafka_source.schema import CREATE_TIME, LOG_APPEND_TIME, source_schema

log = logging.getLogger(__name__)

BATCH_ROWS = 8192
WATERMARK_ATTEMPT_S = 3.0
# Local errors of a broker going away (as its leadership moves): the client carries on with the new leader.
BROKER_GONE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._DESTROY_BROKER,
                         KafkaError._TIMED_OUT})
# What a task rides out: the broker gone, or a broker's answer that the leadership moved (new metadata finds it).
LEADER_MOVED = BROKER_GONE | STALE_METADATA
TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}
DATA_LOSS_HINT = ("Some data may have been lost because they are not available in Kafka any more; either the data "
                  "was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
                  "processed. If you don't want your streaming query to fail on such cases, set the source option "
                  "failOnDataLoss to false.")


class DataLossError(RuntimeError):
    """Offsets the query still had to read are gone and failOnDataLoss is true."""


def report_data_loss(message: str, *, fail: bool) -> None:
    if fail:
        raise DataLossError(f"{DATA_LOSS_HINT} Reason: {message}")  # Spark 4's wording and order, on one line
    log.warning("%s. Some data may have been lost; continuing because failOnDataLoss is false.", message)


def read_range(offsets: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """Yield the records of `offsets` in order, BATCH_ROWS at a time."""
    consumer = Consumer({
        "group.id": f"spark-kafka-source-{uuid.uuid4()}-executor", **options.client_config,
        "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "error",
    })
    try:
        yield from _read(consumer, offsets, options)
    finally:
        consumer.close()


def _read(consumer: Consumer, offsets: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    tp = TopicPartition(offsets.topic, offsets.partition)
    low = _low_watermark(consumer, tp, options)
    start = offsets.start
    if start < low:
        report_data_loss(f"Could not read records in offset [{start}, {offsets.end}) for topic partition "
                         f"{offsets.topic}-{offsets.partition}: the earliest offset is now {low}",
                         fail=options.fail_on_data_loss)
        start = low
    if start >= offsets.end:
        return
    consumer.assign([TopicPartition(offsets.topic, offsets.partition, start)])
    rows = _Rows(options.include_headers)
    position = start
    last_progress = time.monotonic()
    while position < offsets.end:
        messages = consumer.consume(num_messages=BATCH_ROWS, timeout=1.0)
        for message in messages:
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                # Control records (transaction markers) are never delivered, so the log end can be
                # reached with no record at end - 1; only an end below the planned one is a loss.
                if message.offset() < offsets.end:
                    report_data_loss(f"{offsets.topic}-{offsets.partition} ends at offset {message.offset()} "
                                     f"before the planned end {offsets.end}", fail=options.fail_on_data_loss)
                position = offsets.end
                break
            if error is not None and error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                # Retention removed the offsets while this task was reading them.
                report_data_loss(f"Could not read records in offset [{position}, {offsets.end}) for topic "
                                 f"partition {offsets.topic}-{offsets.partition}: {error.str()}",
                                 fail=options.fail_on_data_loss)
                position = offsets.end
                break
            if error is not None and error.code() in LEADER_MOVED:
                continue  # no progress for poll_timeout_ms still ends the task below
            if error is not None:
                raise RuntimeError(f"Reading {offsets.topic}-{offsets.partition} at offset {position}: {error}")
            if message.offset() >= offsets.end:
                position = offsets.end
                break
            rows.add(message)
            position = message.offset() + 1
        if messages:
            last_progress = time.monotonic()
        elif (time.monotonic() - last_progress) * 1000 > options.poll_timeout_ms:
            raise TimeoutError(f"Cannot fetch record for offset {position} of {offsets.topic}-{offsets.partition} "
                               f"in {options.poll_timeout_ms} milliseconds")
        if len(rows) >= BATCH_ROWS:
            yield rows.to_batch()
    if len(rows):
        yield rows.to_batch()


def _low_watermark(consumer: Consumer, tp: TopicPartition, options: SourceOptions) -> int:
    """The partition's log start offset, asked of its leader in short attempts until poll_timeout_ms.

    librdkafka sends the query to the leader in its metadata cache and retries that broker until the timeout,
    so after a leader's death one long attempt waits for the dead broker (or fails with _DESTROY_BROKER once the
    metadata drops it); between attempts the topic's metadata is fetched again, which finds the new leader."""
    deadline = time.monotonic() + options.poll_timeout_ms / 1000
    while True:
        attempt_s = min(WATERMARK_ATTEMPT_S, max(deadline - time.monotonic(), 0.001))
        try:
            return consumer.get_watermark_offsets(tp, timeout=attempt_s, cached=False)[0]
        except KafkaException as exc:
            error = exc.args[0]
            if time.monotonic() >= deadline or not (error.retriable() or error.code() in LEADER_MOVED):
                raise
            log.info("%s-%d: no log start offset yet (%s); asking again with fresh metadata",
                     tp.topic, tp.partition, error.str())
        consumer.list_topics(tp.topic, timeout=max(deadline - time.monotonic(), 0.001))


class _Rows:
    """Column buffers for one Arrow batch in the source's fixed schema."""

    def __init__(self, include_headers: bool):
        self.schema = to_arrow_schema(source_schema(include_headers=include_headers), timezone="UTC")
        self.include_headers = include_headers
        self._clear()

    def _clear(self) -> None:
        self.columns: list[list[object]] = [[] for _ in self.schema.names]

    def __len__(self) -> int:
        return len(self.columns[0])

    def add(self, message: Message) -> None:
        timestamp_type, timestamp = message.timestamp()
        values: list[object] = [message.key(), message.value(), message.topic(), message.partition(),
                                message.offset(), timestamp * 1000, TIMESTAMP_TYPES.get(timestamp_type, -1)]
        if self.include_headers:
            headers = message.headers()  # a record without headers gives null, as in Spark's connector
            values.append([{"key": k, "value": v} for k, v in headers] if headers else None)
        for column, value in zip(self.columns, values):
            column.append(value)

    def to_batch(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(column, type=f.type) for column, f in zip(self.columns, self.schema)], schema=self.schema)
        self._clear()
        return batch
