"""The streaming aggregation over 100,000 generated events gives exactly the per-window totals, also after a
stop and a restart from the checkpoint; append mode writes each closed window once. Each test runs through the
Python fallback and through Spark's JVM connector."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

from tests.integration.broker_process import BrokerProcess
from tests.spark.conftest import EVENTS_START, EVENTS_TOPIC
from tests.spark.support import Jobs, Kafka, Message, job_args

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


def aggregation(broker: BrokerProcess, output: str, checkpoint: str, **overrides: object) -> dict[str, object]:
    return vars(job_args(**{"bootstrap_servers": broker.bootstrap, "input_topic": EVENTS_TOPIC, "output_topic": output,
                       "checkpoint": checkpoint, "window": "1 minute", "watermark": "10 minutes",
                       "output_mode": "update", **overrides}))


def test_window_totals_match_the_events(jobs: Jobs, kafka: Kafka, spark_broker: BrokerProcess,
                                        shop_events: list[Message], checkpoint: str) -> None:
    output = f"window-totals-{jobs.connector}"
    kafka.create_topic(output, partitions=1)
    began = time.monotonic()
    result = jobs("stream", "aggregate", aggregation(spark_broker, output, checkpoint))
    elapsed = time.monotonic() - began
    jobs.check_sources(result)
    assert sum(result["input_rows"]) == len(shop_events)
    busy = result["busy_s"]
    print(f"\naggregation ({jobs.connector}): {len(shop_events)} events, {elapsed:.1f} s from start to end "
          f"({len(shop_events) / elapsed:,.0f} events/s), {busy:.1f} s in micro-batches "
          f"({len(shop_events) / busy:,.0f} events/s)")
    assert latest_totals(kafka, output) == expected_totals(shop_events, window=timedelta(minutes=1))


def test_restart_from_checkpoint_gives_the_same_totals(jobs: Jobs, kafka: Kafka, spark_broker: BrokerProcess,
                                                       shop_events: list[Message], checkpoint: str) -> None:
    output = f"window-totals-restarted-{jobs.connector}"
    kafka.create_topic(output, partitions=1)
    limit = 20_000
    first = jobs("stream", "aggregate", aggregation(spark_broker, output, checkpoint, max_offsets_per_trigger=limit,
                                                    available_now=False), batches=2)
    second = jobs("stream", "aggregate", aggregation(spark_broker, output, checkpoint, max_offsets_per_trigger=limit))
    jobs.check_sources(first)
    jobs.check_sources(second)
    batches = first["input_rows"] + second["input_rows"]
    assert max(batches) <= limit, f"maxOffsetsPerTrigger={limit} exceeded: {batches}"
    assert 0 < sum(second["input_rows"]) < len(shop_events)  # it resumed, not restarted
    assert latest_totals(kafka, output) == expected_totals(shop_events, window=timedelta(minutes=1))


def test_append_mode_writes_each_closed_window_once(jobs: Jobs, kafka: Kafka, spark_broker: BrokerProcess,
                                                    checkpoint: str) -> None:
    source, output = f"few-events-{jobs.connector}", f"closed-windows-{jobs.connector}"
    kafka.create_topic(source, partitions=2)
    kafka.create_topic(output, partitions=1)
    jobs("generate", vars(job_args(bootstrap_servers=spark_broker.bootstrap, topic=source, count=3000,
                                   start=EVENTS_START, events_per_second=100.0, jitter_ms=2000, seed=11)))
    events = kafka.read_all(source)
    result = jobs("stream", "aggregate", aggregation(spark_broker, output, checkpoint, input_topic=source,
                                                     window="10 seconds", watermark="5 seconds", output_mode="append"))
    jobs.check_sources(result)
    written = [m.key.decode() for m in kafka.read_all(output)]
    assert len(written) == len(set(written)), "a window was written twice"
    watermark = max(_event_time(json.loads(m.value)) for m in events) - timedelta(seconds=5)
    expected = expected_totals(events, window=timedelta(seconds=10))
    closed = {key for key in expected if _key_start(key) + timedelta(seconds=10) < watermark}
    assert closed <= set(written)
    assert all(_key_start(key) + timedelta(seconds=10) <= watermark for key in written)
    assert latest_totals(kafka, output) == {key: expected[key] for key in written}


def _event_time(event: dict) -> datetime:
    return datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))


def _window_start(moment: datetime, window: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=moment.tzinfo)
    return moment - (moment - epoch) % window


def _key_start(key: str) -> datetime:
    return datetime.fromisoformat(key.split("/")[0].replace("Z", "+00:00"))
