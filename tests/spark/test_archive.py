"""The archiver's Parquet output holds exactly the topic's messages, once each, after a mid-stream restart."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from pyspark.sql import SparkSession

from spark_jobs import archive
from tests.integration.broker_process import BrokerProcess
from tests.spark.support import Kafka, job_args
from tests.spark.test_aggregate import wait_for_batches

DAY_MS = 86_400_000
# Two days before today (UTC): recent enough that the default 7-day retention keeps the records.
FIRST_DAY_MS = (int(time.time() * 1000) // DAY_MS - 2) * DAY_MS


def records(first: int, count: int) -> list[tuple[bytes, bytes, int]]:
    """Keyed records whose timestamps spread over three days."""
    return [(f"key-{i % 17}".encode(), f"message-{i}".encode(), FIRST_DAY_MS + (i % 3) * DAY_MS + i)
            for i in range(first, first + count)]


def test_archive_has_every_message_once_after_a_restart(spark: SparkSession, kafka: Kafka,
                                                        spark_broker: BrokerProcess, tmp_path, checkpoint) -> None:
    kafka.create_topic("archived", partitions=2)
    kafka.produce("archived", records(0, 3000))
    path = str(tmp_path / "archive")
    args = job_args(bootstrap_servers=spark_broker.bootstrap, topic="archived", path=path, checkpoint=checkpoint,
                    max_offsets_per_trigger=700, available_now=False)
    first = archive.start(spark, args)
    wait_for_batches(first, 2)
    first.stop()
    kafka.produce("archived", records(3000, 1000))
    second = archive.start(spark, job_args(**{**vars(args), "available_now": True}))
    second.awaitTermination()
    assert second.exception() is None

    archived = spark.read.parquet(path).select("partition", "offset", "value", "date").collect()
    in_topic = {(m.partition, m.offset): m for m in kafka.read_all("archived")}
    assert len(archived) == len(in_topic) == 4000
    assert {(r.partition, r.offset): r.value for r in archived} == {k: m.value for k, m in in_topic.items()}
    for row in archived:
        sent = in_topic[row.partition, row.offset]
        assert row.date == datetime.fromtimestamp(sent.timestamp_ms / 1000, timezone.utc).date()
    assert len({row.date for row in archived}) == 3
