"""Reads through each connector (the Python fallback and Spark's JVM connector): partitions added to a topic are
read from their start, headers and timestamps come through with includeHeaders, and startingTimestamp starts at
the first record at or after it."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewPartitions

from tests.integration.broker_process import BrokerProcess
from tests.spark.support import Jobs, Kafka


def test_new_partitions_are_read_from_their_start(jobs: Jobs, kafka: Kafka, spark_broker: BrokerProcess,
                                                  tmp_path: Path) -> None:
    topic = f"growing-{jobs.connector}"
    kafka.create_topic(topic, partitions=1)
    now_ms = int(time.time() * 1000)
    kafka.produce(topic, [(b"k", b"v", now_ms)] * 10, partition=0)
    options = {"kafka.bootstrap.servers": spark_broker.bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    checkpoint = str(tmp_path / "checkpoint")
    first = jobs("read", options, columns=["partition", "offset"], checkpoint=checkpoint)
    jobs.check_sources(first)
    assert [(r["partition"], r["offset"]) for r in first["rows"]] == [(0, offset) for offset in range(10)]

    kafka.admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    kafka.produce(topic, [(b"k", b"v", now_ms)] * 5, partition=1)
    kafka.produce(topic, [(b"k", b"v", now_ms)] * 3, partition=0)
    second = jobs("read", options, columns=["partition", "offset"], checkpoint=checkpoint)
    jobs.check_sources(second)
    assert sorted((r["partition"], r["offset"]) for r in second["rows"]) == \
        [(0, 10), (0, 11), (0, 12)] + [(1, offset) for offset in range(5)]


def test_headers_and_timestamps_come_through(jobs: Jobs, kafka: Kafka, spark_broker: BrokerProcess) -> None:
    topic = f"with-headers-{jobs.connector}"
    kafka.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": spark_broker.bootstrap})
    producer.produce(topic, key=b"k", value=b"v", timestamp=1_800_000_000_123,
                     headers=[("trace", b"abc"), ("empty", None)])
    producer.produce(topic, key=None, value=None)
    assert producer.flush(30) == 0
    rows = jobs("read", {"kafka.bootstrap.servers": spark_broker.bootstrap, "subscribe": topic,
                         "includeHeaders": "true"},
                columns=["key", "value", "topic", "partition", "offset", "timestampType", "timestamp", "headers"])
    rows = sorted(rows["rows"], key=lambda r: r["offset"])
    assert [(r["key"], r["value"], r["topic"], r["partition"], r["offset"], r["timestampType"]) for r in rows] == [
        (b"k", b"v", topic, 0, 0, 0), (None, None, topic, 0, 1, 0)]
    assert int(rows[0]["timestamp"].timestamp() * 1000) == 1_800_000_000_123
    assert [(h["key"], h["value"]) for h in rows[0]["headers"]] == [("trace", b"abc"), ("empty", None)]
    assert rows[1]["headers"] is None  # no headers: null, not an empty array


def test_starting_timestamp_starts_at_the_first_later_record(jobs: Jobs, kafka: Kafka,
                                                              spark_broker: BrokerProcess) -> None:
    topic = f"timed-{jobs.connector}"
    kafka.create_topic(topic, partitions=2)
    base_ms = int(time.time() * 1000) - 60_000
    for partition in (0, 1):
        kafka.produce(topic, [(b"k", b"v", base_ms + 1000 * i) for i in range(10)], partition=partition)
    rows = jobs("read", {"kafka.bootstrap.servers": spark_broker.bootstrap, "subscribe": topic,
                         "startingTimestamp": str(base_ms + 6500)}, columns=["partition", "offset"])
    assert sorted((r["partition"], r["offset"]) for r in rows["rows"]) == [(p, o) for p in (0, 1) for o in range(7, 10)]
