"""Offsets a query still had to read are deleted by retention: failOnDataLoss=false skips ahead to the log
start, true (the default) stops the query with an error that says what happened and how to continue. Through
the Python fallback and through Spark's JVM connector, each with its own topic and checkpoint."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import OffsetSpec

from tests.integration.broker_process import BrokerProcess
from tests.spark.conftest import CONNECTORS, jobs_for
from tests.spark.support import Jobs, Kafka

# Small segments and a small size limit, so retention deletes offsets soon after they are written.
TOPIC_CONFIG = {"segment.bytes": "1000", "retention.bytes": "3000"}


@dataclass(frozen=True)
class Lossy:
    """A checkpoint that stopped at offset 5 of `topic`, whose log start retention has since moved past it."""
    jobs: Jobs
    topic: str
    checkpoint: Path
    end: int


def offsets_query(lossy_jobs: Jobs, broker: BrokerProcess, topic: str, checkpoint: Path, *,
                  fail_on_data_loss: bool) -> dict[str, Any]:
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
               "failOnDataLoss": str(fail_on_data_loss).lower()}
    return lossy_jobs("read", options, columns=["partition", "offset"], checkpoint=str(checkpoint))


def restart_from_copy(lossy: Lossy, broker: BrokerProcess, tmp_path: Path, *,
                      fail_on_data_loss: bool) -> dict[str, Any]:
    """Restart from a copy of the shared checkpoint, so every test resumes from the same stopped query."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(lossy.checkpoint, checkpoint)
    return offsets_query(lossy.jobs, broker, lossy.topic, checkpoint, fail_on_data_loss=fail_on_data_loss)


def records(first: int, count: int) -> list[tuple[bytes, bytes, int]]:
    now_ms = int(time.time() * 1000)
    return [(b"k", f"record-{i}-".encode() + b"x" * 100, now_ms) for i in range(first, first + count)]


@pytest.fixture(scope="module", params=CONNECTORS)
def lossy(request: pytest.FixtureRequest, kafka: Kafka, spark_broker: BrokerProcess,
          tmp_path_factory: pytest.TempPathFactory) -> Lossy:
    jobs = jobs_for(request, request.param)
    topic = f"lossy-{jobs.connector}"
    checkpoint = tmp_path_factory.mktemp("lossy") / "checkpoint"
    kafka.create_topic(topic, partitions=1, config=TOPIC_CONFIG)
    kafka.produce(topic, records(0, 5), one_batch_each=True)
    first = offsets_query(jobs, spark_broker, topic, checkpoint, fail_on_data_loss=True)
    jobs.check_sources(first)
    assert [(r["partition"], r["offset"]) for r in first["rows"]] == [(0, offset) for offset in range(5)]
    kafka.produce(topic, records(5, 60), one_batch_each=True)
    deadline = time.monotonic() + 60
    while kafka.offsets(topic, 1, OffsetSpec.earliest())[0] <= 5:
        assert time.monotonic() < deadline, "retention did not delete the old segments"
        time.sleep(0.2)
    return Lossy(jobs, topic, checkpoint, kafka.offsets(topic, 1, OffsetSpec.latest())[0])


def test_fail_on_data_loss_false_continues_from_the_log_start(lossy: Lossy, kafka: Kafka, spark_broker: BrokerProcess,
                                                              tmp_path: Path) -> None:
    result = restart_from_copy(lossy, spark_broker, tmp_path, fail_on_data_loss=False)
    lossy.jobs.check_sources(result)
    log_start = kafka.offsets(lossy.topic, 1, OffsetSpec.earliest())[0]
    seen = [(r["partition"], r["offset"]) for r in result["rows"]]
    first = seen[0][1]
    assert seen == [(0, offset) for offset in range(first, lossy.end)] and 5 < first <= log_start


def test_fail_on_data_loss_true_stops_with_a_clear_error(lossy: Lossy, spark_broker: BrokerProcess,
                                                         tmp_path: Path) -> None:
    result = restart_from_copy(lossy, spark_broker, tmp_path, fail_on_data_loss=True)
    assert result["error"] is not None
    # Spark 4's KafkaIllegalStateException, which the fallback words alike
    assert "set the source option failOnDataLoss to false" in result["error"]
    assert f"Could not read records in offset [5, {lossy.end}) for topic partition {lossy.topic}-0" in result["error"]
    assert result["rows"] == []
