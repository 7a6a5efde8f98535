"""The batch report agrees with ListOffsets and honours startingOffsets/endingOffsets (per-partition JSON too),
through the Python fallback and through Spark's JVM connector; and it runs under spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import OffsetSpec

from pybroker.spark_jobs.report import PartitionReport
from tests.integration.broker_process import REPO, BrokerProcess
from tests.spark.conftest import EVENTS_TOPIC
from tests.spark.support import SUBMITTED_DRIVER_JVM, Jobs, Kafka, Message, job_args


def run_report(jobs: Jobs, **args: object) -> list[PartitionReport]:
    return [PartitionReport(**fields) for fields in jobs("report", vars(job_args(**args)))]


def test_report_matches_list_offsets(jobs: Jobs, kafka: Kafka, spark_broker: BrokerProcess,
                                     shop_events: list[Message]) -> None:
    reports = run_report(jobs, bootstrap_servers=spark_broker.bootstrap, topic=EVENTS_TOPIC,
                         starting_offsets="earliest", ending_offsets="latest")
    earliest = kafka.offsets(EVENTS_TOPIC, 3, OffsetSpec.earliest())
    latest = kafka.offsets(EVENTS_TOPIC, 3, OffsetSpec.latest())
    assert [r.partition for r in reports] == [0, 1, 2]
    for r in reports:
        sent = [m for m in shop_events if m.partition == r.partition]
        assert (r.messages, r.first_offset, r.last_offset) == (latest[r.partition] - earliest[r.partition],
                                                               earliest[r.partition], latest[r.partition] - 1)
        assert r.bytes == sum(len(m.key or b"") + len(m.value or b"") for m in sent)
        assert int(r.first_timestamp.timestamp() * 1000) == min(m.timestamp_ms for m in sent)
        assert int(r.last_timestamp.timestamp() * 1000) == max(m.timestamp_ms for m in sent)


def test_report_between_offsets(jobs: Jobs, spark_broker: BrokerProcess, shop_events: list[Message]) -> None:
    starting = json.dumps({EVENTS_TOPIC: {"0": 100, "1": -2, "2": 5}})
    ending = json.dumps({EVENTS_TOPIC: {"0": 200, "1": 10, "2": -1}})
    reports = run_report(jobs, bootstrap_servers=spark_broker.bootstrap, topic=EVENTS_TOPIC,
                         starting_offsets=starting, ending_offsets=ending, min_partitions=7)
    in_partition_2 = sum(1 for m in shop_events if m.partition == 2)
    assert [(r.partition, r.messages, r.first_offset, r.last_offset) for r in reports] == [
        (0, 100, 100, 199), (1, 10, 0, 9), (2, in_partition_2 - 5, 5, in_partition_2 - 1)]


def test_report_runs_under_spark_submit(kafka: Kafka, spark_broker: BrokerProcess, tmp_path: Path) -> None:
    kafka.create_topic("submitted", partitions=2)
    now_ms = int(time.time() * 1000)
    kafka.produce("submitted", [(f"k{i}".encode(), b"v" * i, now_ms + i) for i in range(50)], partition=1)
    spark_submit = Path(sys.executable).parent / "spark-submit"
    result = subprocess.run(
        [str(spark_submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         "--driver-java-options", SUBMITTED_DRIVER_JVM, "pybroker/spark_jobs/report.py",
         "--bootstrap-servers", spark_broker.bootstrap, "--topic", "submitted", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr[-3000:]
    # spark-submit merges the driver's stderr (log lines) into its stdout.
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(r["partition"], r["messages"], r["first_offset"], r["last_offset"], r["bytes"]) for r in lines] == [
        (1, 50, 0, 49, sum(len(f"k{i}") + i for i in range(50)))]
    assert "Python Data Source 'pybroker-kafka'" in result.stdout
