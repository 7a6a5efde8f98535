"""The streaming aggregation over 100,000 generated events gives exactly the per-window totals, also after a
stop and a restart from the checkpoint; append mode writes each closed window once."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from spark_jobs import aggregate, generate
from tests.integration.broker_process import BrokerProcess
from tests.spark.conftest import EVENTS_START, EVENTS_TOPIC
from tests.spark.support import Kafka, Message, job_args

Totals = dict[str, tuple[int, Decimal]]


def expected_totals(events: list[Message], *, window: timedelta) -> Totals:
    """Per "<window start>/<category>": event count and amount sum, computed here without Spark."""
    counts: Counter[str] = Counter()
    sums: dict[str, Decimal] = {}
    for message in events:
        event = json.loads(message.value, parse_float=Decimal)
        start = _window_start(_event_time(event), window)
        key = f"{start:%Y-%m-%dT%H:%M:%SZ}/{event['category']}"
        counts[key] += 1
        sums[key] = sums.get(key, Decimal(0)) + Decimal(event["amount"])
    return {key: (counts[key], sums[key]) for key in counts}


def latest_totals(kafka: Kafka, topic: str) -> Totals:
    """The last record per key in the output topic, which is what a compacted topic would keep."""
    result: Totals = {}
    for message in sorted(kafka.read_all(topic), key=lambda m: (m.partition, m.offset)):
        value = json.loads(message.value, parse_float=Decimal)
        result[message.key.decode()] = (value["events"], Decimal(value["amount"]))
    return result


def aggregation(broker: BrokerProcess, output: str, checkpoint: str, **overrides: object) -> argparse.Namespace:
    return job_args(**{"bootstrap_servers": broker.bootstrap, "input_topic": EVENTS_TOPIC, "output_topic": output,
                       "checkpoint": checkpoint, "window": "1 minute", "watermark": "10 minutes",
                       "output_mode": "update", **overrides})


def test_window_totals_match_the_events(spark: SparkSession, kafka: Kafka, spark_broker: BrokerProcess,
                                        shop_events: list[Message], checkpoint: str) -> None:
    kafka.create_topic("window-totals", partitions=1)
    began = time.monotonic()
    query = aggregate.start(spark, aggregation(spark_broker, "window-totals", checkpoint))
    query.awaitTermination()
    elapsed = time.monotonic() - began
    assert query.exception() is None
    assert sum(p["numInputRows"] for p in query.recentProgress) == len(shop_events)
    busy = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress) / 1000
    print(f"\naggregation: {len(shop_events)} events, {elapsed:.1f} s from start to end "
          f"({len(shop_events) / elapsed:,.0f} events/s), {busy:.1f} s in micro-batches "
          f"({len(shop_events) / busy:,.0f} events/s)")
    assert latest_totals(kafka, "window-totals") == expected_totals(shop_events, window=timedelta(minutes=1))


def test_restart_from_checkpoint_gives_the_same_totals(spark: SparkSession, kafka: Kafka,
                                                       spark_broker: BrokerProcess, shop_events: list[Message],
                                                       checkpoint: str) -> None:
    kafka.create_topic("window-totals-restarted", partitions=1)
    limit = 20_000
    first = aggregate.start(spark, aggregation(spark_broker, "window-totals-restarted", checkpoint,
                                               max_offsets_per_trigger=limit, available_now=False))
    wait_for_batches(first, 2)
    first.stop()
    second = aggregate.start(spark, aggregation(spark_broker, "window-totals-restarted", checkpoint,
                                                max_offsets_per_trigger=limit))
    second.awaitTermination()
    assert second.exception() is None
    batches = [p["numInputRows"] for p in first.recentProgress + second.recentProgress]
    assert max(batches) <= limit, f"maxOffsetsPerTrigger={limit} exceeded: {batches}"
    assert sum(p["numInputRows"] for p in second.recentProgress) < len(shop_events)  # it resumed, not restarted
    assert latest_totals(kafka, "window-totals-restarted") == expected_totals(shop_events,
                                                                              window=timedelta(minutes=1))


def test_append_mode_writes_each_closed_window_once(spark: SparkSession, kafka: Kafka,
                                                    spark_broker: BrokerProcess, checkpoint: str) -> None:
    kafka.create_topic("few-events", partitions=2)
    kafka.create_topic("closed-windows", partitions=1)
    generate.generate(spark, job_args(bootstrap_servers=spark_broker.bootstrap, topic="few-events", count=3000,
                                      start=EVENTS_START, events_per_second=100.0, jitter_ms=2000, seed=11))
    events = kafka.read_all("few-events")
    query = aggregate.start(spark, aggregation(spark_broker, "closed-windows", checkpoint, input_topic="few-events",
                                               window="10 seconds", watermark="5 seconds", output_mode="append"))
    query.awaitTermination()
    assert query.exception() is None
    written = [m.key.decode() for m in kafka.read_all("closed-windows")]
    assert len(written) == len(set(written)), "a window was written twice"
    watermark = max(_event_time(json.loads(m.value)) for m in events) - timedelta(seconds=5)
    expected = expected_totals(events, window=timedelta(seconds=10))
    closed = {key for key in expected if _key_start(key) + timedelta(seconds=10) < watermark}
    assert closed <= set(written)
    assert all(_key_start(key) + timedelta(seconds=10) <= watermark for key in written)
    assert latest_totals(kafka, "closed-windows") == {key: expected[key] for key in written}


def wait_for_batches(query: StreamingQuery, count: int) -> None:
    """Block until `count` micro-batches with input have completed (or the query ended)."""
    while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < count:
        assert query.isActive, query.exception()
        query.awaitTermination(0.2)


def _event_time(event: dict) -> datetime:
    return datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))


def _window_start(moment: datetime, window: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=moment.tzinfo)
    return moment - (moment - epoch) % window


def _key_start(key: str) -> datetime:
    return datetime.fromisoformat(key.split("/")[0].replace("Z", "+00:00"))
