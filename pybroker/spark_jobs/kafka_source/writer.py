"""Executor-side sink: write DataFrame rows to Kafka with an idempotent, acks=all producer.

Those are the kafka-clients 3.x producer defaults Spark's sink runs with, and so is its partitioner: keyed rows go
to murmur2(key) % partitions (librdkafka's own default, consistent_random, hashes with CRC32 and would place keys
elsewhere). Like Spark's sink this gives at-least-once delivery: a retried Spark task writes its rows again.
"""

from __future__ import annotations

from typing import Iterator

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from pyspark.sql import Row

from pybroker.spark_jobs.kafka_source.options import SinkOptions

FLUSH_TIMEOUT_S = 300.0


def write_rows(rows: Iterator[Row], options: SinkOptions) -> int:
    """Produce every row and wait until all are acknowledged; the first delivery error fails the task."""
    producer = Producer({"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
                         **options.client_config})
    failures: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(error)

    count = 0
    for row in rows:
        fields = row.asDict()
        topic = options.topic if options.topic is not None else fields.get("topic")
        if topic is None:
            raise ValueError("null topic present in the data. Use the topic option for setting a topic.")
        record: dict[str, object] = {"key": _bytes(fields.get("key")), "value": _bytes(fields.get("value")),
                  "headers": [(h["key"], _bytes(h["value"])) for h in fields.get("headers") or ()],
                  "on_delivery": on_delivery}
        if fields.get("partition") is not None:
            record["partition"] = fields["partition"]
        _produce(producer, topic, record)
        count += 1
        if failures:
            break
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if failures:
        raise KafkaException(failures[0])
    if remaining:
        raise TimeoutError(f"{remaining} records were not acknowledged within {FLUSH_TIMEOUT_S:.0f} s")
    return count


def _produce(producer: Producer, topic: str, record: dict[str, object]) -> None:
    while True:
        try:
            producer.produce(topic, **record)  # type: ignore[arg-type]
            producer.poll(0)
            return
        except BufferError:  # the local queue is full: serve delivery reports until there is room
            producer.poll(0.1)


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):  # a binary column's value in a Spark row
        return bytes(value)
    raise TypeError(f"key, value and header values must be string or binary, not {type(value).__name__}")
