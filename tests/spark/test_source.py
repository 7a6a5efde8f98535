"""Reads through the fallback source: partitions added to a topic are read from their start, headers and
timestamps come through, and startingTimestamp starts at the first record at or after it."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewPartitions
from pyspark.sql import SparkSession

from spark_jobs.kafka_format import kafka_format
from tests.integration.broker_process import BrokerProcess
from tests.spark.support import Kafka, collecting_query


def test_new_partitions_are_read_from_their_start(spark: SparkSession, kafka: Kafka, spark_broker: BrokerProcess,
                                                  tmp_path: Path) -> None:
    kafka.create_topic("growing", partitions=1)
    now_ms = int(time.time() * 1000)
    kafka.produce("growing", [(b"k", b"v", now_ms)] * 10, partition=0)
    seen: list[tuple[int, int]] = []
    checkpoint = str(tmp_path / "checkpoint")
    collecting_query(spark, spark_broker.bootstrap, "growing", checkpoint, seen).awaitTermination()
    assert seen == [(0, offset) for offset in range(10)]

    kafka.admin.create_partitions([NewPartitions("growing", 2)])["growing"].result(30)
    kafka.produce("growing", [(b"k", b"v", now_ms)] * 5, partition=1)
    kafka.produce("growing", [(b"k", b"v", now_ms)] * 3, partition=0)
    seen.clear()
    query = collecting_query(spark, spark_broker.bootstrap, "growing", checkpoint, seen)
    query.awaitTermination()
    assert query.exception() is None
    assert sorted(seen) == [(0, 10), (0, 11), (0, 12)] + [(1, offset) for offset in range(5)]


def test_headers_and_timestamps_come_through(spark: SparkSession, kafka: Kafka,
                                             spark_broker: BrokerProcess) -> None:
    kafka.create_topic("with-headers", partitions=1)
    producer = Producer({"bootstrap.servers": spark_broker.bootstrap})
    producer.produce("with-headers", key=b"k", value=b"v", timestamp=1_800_000_000_123,
                     headers=[("trace", b"abc"), ("empty", None)])
    producer.produce("with-headers", key=None, value=None)
    assert producer.flush(30) == 0
    rows = (spark.read.format(kafka_format(spark)).option("kafka.bootstrap.servers", spark_broker.bootstrap)
            .option("subscribe", "with-headers").option("includeHeaders", "true").load()
            .orderBy("offset").collect())
    assert [(r.key, r.value, r.topic, r.partition, r.offset, r.timestampType) for r in rows] == [
        (b"k", b"v", "with-headers", 0, 0, 0), (None, None, "with-headers", 0, 1, 0)]
    assert int(rows[0].timestamp.timestamp() * 1000) == 1_800_000_000_123
    assert [(h.key, h.value) for h in rows[0].headers] == [("trace", b"abc"), ("empty", None)]
    assert rows[1].headers == []


def test_starting_timestamp_starts_at_the_first_later_record(spark: SparkSession, kafka: Kafka,
                                                              spark_broker: BrokerProcess) -> None:
    kafka.create_topic("timed", partitions=2)
    base_ms = int(time.time() * 1000) - 60_000
    for partition in (0, 1):
        kafka.produce("timed", [(b"k", b"v", base_ms + 1000 * i) for i in range(10)], partition=partition)
    rows = (spark.read.format(kafka_format(spark)).option("kafka.bootstrap.servers", spark_broker.bootstrap)
            .option("subscribe", "timed").option("startingTimestamp", str(base_ms + 6500)).load()
            .select("partition", "offset").collect())
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in (0, 1) for o in range(7, 10)]
