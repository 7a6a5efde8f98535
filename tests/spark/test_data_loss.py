"""Offsets a query still had to read are deleted by retention: failOnDataLoss=false skips ahead to the log
start, true (the default) stops the query with an error that says what happened and how to continue."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import OffsetSpec
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from tests.integration.broker_process import BrokerProcess
from tests.spark.support import Kafka, collecting_query

TOPIC = "lossy"
# Small segments and a small size limit, so retention deletes offsets soon after they are written.
TOPIC_CONFIG = {"segment.bytes": "1000", "retention.bytes": "3000"}


def offsets_query(spark: SparkSession, broker: BrokerProcess, checkpoint: Path, seen: list[tuple[int, int]], *,
                  fail_on_data_loss: bool) -> StreamingQuery:
    return collecting_query(spark, broker.bootstrap, TOPIC, str(checkpoint), seen,
                            failOnDataLoss=str(fail_on_data_loss).lower())


def restart_from_copy(spark: SparkSession, broker: BrokerProcess, original: Path, tmp_path: Path,
                      seen: list[tuple[int, int]], *, fail_on_data_loss: bool) -> StreamingQuery:
    """Restart from a copy of the shared checkpoint, so every test resumes from the same stopped query."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(original, checkpoint)
    return offsets_query(spark, broker, checkpoint, seen, fail_on_data_loss=fail_on_data_loss)


def records(first: int, count: int) -> list[tuple[bytes, bytes, int]]:
    now_ms = int(time.time() * 1000)
    return [(b"k", f"record-{i}-".encode() + b"x" * 100, now_ms) for i in range(first, first + count)]


@pytest.fixture(scope="module")
def checkpoint_behind_log_start(spark: SparkSession, kafka: Kafka, spark_broker: BrokerProcess,
                                tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A checkpoint that stopped at offset 5, and the log start retention has since moved past it."""
    checkpoint = tmp_path_factory.mktemp("lossy") / "checkpoint"
    kafka.create_topic(TOPIC, partitions=1, config=TOPIC_CONFIG)
    kafka.produce(TOPIC, records(0, 5), one_batch_each=True)
    seen: list[tuple[int, int]] = []
    query = offsets_query(spark, spark_broker, checkpoint, seen, fail_on_data_loss=True)
    query.awaitTermination()
    assert query.exception() is None and seen == [(0, offset) for offset in range(5)]
    kafka.produce(TOPIC, records(5, 60), one_batch_each=True)
    deadline = time.monotonic() + 60
    while kafka.offsets(TOPIC, 1, OffsetSpec.earliest())[0] <= 5:
        assert time.monotonic() < deadline, "retention did not delete the old segments"
        time.sleep(0.2)
    return checkpoint, kafka.offsets(TOPIC, 1, OffsetSpec.latest())[0]


def test_fail_on_data_loss_false_continues_from_the_log_start(
        spark: SparkSession, kafka: Kafka, spark_broker: BrokerProcess, tmp_path: Path,
        checkpoint_behind_log_start: tuple[Path, int]) -> None:
    original, end = checkpoint_behind_log_start
    seen: list[tuple[int, int]] = []
    query = restart_from_copy(spark, spark_broker, original, tmp_path, seen, fail_on_data_loss=False)
    query.awaitTermination()
    assert query.exception() is None
    log_start = kafka.offsets(TOPIC, 1, OffsetSpec.earliest())[0]
    first = seen[0][1]
    assert seen == [(0, offset) for offset in range(first, end)] and 5 < first <= log_start


def test_fail_on_data_loss_true_stops_with_a_clear_error(
        spark: SparkSession, spark_broker: BrokerProcess, tmp_path: Path,
        checkpoint_behind_log_start: tuple[Path, int]) -> None:
    original, _ = checkpoint_behind_log_start
    seen: list[tuple[int, int]] = []
    query = restart_from_copy(spark, spark_broker, original, tmp_path, seen, fail_on_data_loss=True)
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination()
    assert "Cannot fetch offset 5 of lossy-0" in str(failure.value)
    assert 'set the source option "failOnDataLoss" to "false"' in str(failure.value)
    assert seen == []
