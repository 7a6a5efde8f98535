"""The archiver's Parquet output holds exactly the topic's messages, once each, after its process is killed
mid-stream (SIGKILL) and restarted from the checkpoint: through the Python fallback and through Spark's JVM
connector, each job run by its venv's spark-submit as it would be deployed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.integration.broker_process import REPO, BrokerProcess
from tests.spark import remote
from tests.spark.support import SUBMITTED_DRIVER_JVM, Kafka, require_connector

DAY_MS = 86_400_000
# Two days before today (UTC): recent enough that the default 7-day retention keeps the records.
FIRST_DAY_MS = (int(time.time() * 1000) // DAY_MS - 2) * DAY_MS
CONNECTOR_LOG = {"python": "Python Data Source 'pybroker-kafka'",
                 "jvm": "Spark's connector (org.apache.spark.sql.kafka010.KafkaSourceProvider)"}


def records(first: int, count: int) -> list[tuple[bytes, bytes, int]]:
    """Keyed records whose timestamps spread over three days."""
    return [(f"key-{i % 17}".encode(), f"message-{i}".encode(), FIRST_DAY_MS + (i % 3) * DAY_MS + i)
            for i in range(first, first + count)]


def submit(connector: str, log: Path, job_args: list[str]) -> subprocess.Popen[bytes]:
    """spark-submit pybroker/spark_jobs/archive.py in its own process group, forced onto one connector."""
    if connector == "jvm":
        command = [str(remote.VENV / "bin" / "spark-submit"), "--jars", remote.jars_argument()]
        env = {key: value for key, value in remote.spark40_environment().items() if key != "PYSPARK_SUBMIT_ARGS"}
    else:
        command = [str(Path(sys.executable).parent / "spark-submit")]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_JOBS_KAFKA_CONNECTOR": "python"}
    command += ["--master", "local[2]", "--conf", "spark.ui.enabled=false",
                "--driver-java-options", SUBMITTED_DRIVER_JVM, "pybroker/spark_jobs/archive.py", *job_args]
    with log.open("ab") as out:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_for_commits(process: subprocess.Popen[bytes], checkpoint: Path, count: int, log: Path) -> None:
    deadline = time.monotonic() + 300
    commits = checkpoint / "commits"
    while not (commits.is_dir() and sum(1 for f in commits.iterdir() if f.name.isdigit()) >= count):
        assert process.poll() is None, f"the archiver exited early:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {count} committed batches:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


@pytest.mark.parametrize("connector", ["python", "jvm"])
def test_archive_has_every_message_once_after_a_kill_and_restart(connector: str, spark: SparkSession, kafka: Kafka,
                                                                 spark_broker: BrokerProcess,
                                                                 tmp_path: Path) -> None:
    if connector == "jvm":
        require_connector()
    topic = f"archived-{connector}"
    kafka.create_topic(topic, partitions=2)
    kafka.produce(topic, records(0, 3000))
    path, checkpoint, log = tmp_path / "archive", tmp_path / "checkpoint", tmp_path / "archive.log"
    args = ["--bootstrap-servers", spark_broker.bootstrap, "--topic", topic, "--path", str(path),
            "--checkpoint", str(checkpoint), "--max-offsets-per-trigger", "1000"]
    first = submit(connector, log, args)
    try:
        wait_for_commits(first, checkpoint, 2, log)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    kafka.produce(topic, records(3000, 1000))
    second = submit(connector, log, [*args, "--available-now"])
    assert second.wait(300) == 0, log.read_text()[-3000:]
    assert CONNECTOR_LOG[connector] in log.read_text()

    archived = spark.read.parquet(str(path)).select("partition", "offset", "value", "date", "headers").collect()
    in_topic = {(m.partition, m.offset): m for m in kafka.read_all(topic)}
    assert len(archived) == len(in_topic) == 4000
    assert {(r.partition, r.offset): r.value for r in archived} == {k: m.value for k, m in in_topic.items()}
    for row in archived:
        sent = in_topic[row.partition, row.offset]
        assert row.date == datetime.fromtimestamp(sent.timestamp_ms / 1000, timezone.utc).date()
        assert row.headers is None  # includeHeaders: a record without headers has null
    assert len({row.date for row in archived}) == 3
