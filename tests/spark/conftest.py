"""One broker and one local Spark (local[2]) for every Spark test, plus the generated event stream they share.

Starting Spark costs seconds, so the session is shared; each test uses its own topics and checkpoints. Both are
package-scoped, so they stop as soon as the last Spark test is done. A test taking `jobs` runs twice: through the
Python fallback in this process, and through Spark's JVM connector in a Spark 4.0 process (`remote.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from pyspark.sql import SparkSession

from pybroker.spark_jobs import generate
from pybroker.spark_jobs.common import build_session
from tests.integration.broker_process import BrokerProcess
from tests.spark import remote
from tests.spark.operations import OPERATIONS
from tests.spark.support import Jobs, Kafka, Message, job_args, require_connector

EVENTS_TOPIC = "shop-events"
EVENT_COUNT = 100_000
EVENTS_START = "2026-03-01T00:00:00+00:00"
CONNECTORS = ["python", "jvm"]


@pytest.fixture(scope="package")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Retention runs every 200 ms so the failOnDataLoss tests see old segments go quickly.
    process = BrokerProcess(tmp_path_factory.mktemp("spark-broker"),
                            {"log.retention.check.interval.ms": "200"}).start()
    yield process
    process.kill()


@pytest.fixture(scope="package")
def kafka(spark_broker: BrokerProcess) -> Iterator[Kafka]:
    helper = Kafka(spark_broker.bootstrap)
    yield helper
    helper.close()


@pytest.fixture(scope="package")
def spark() -> Iterator[SparkSession]:
    session = build_session("pybroker-spark-tests", job_args(master="local[2]", shuffle_partitions=2))
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="package")
def spark40(tmp_path_factory: pytest.TempPathFactory) -> Iterator[remote.RemoteSpark]:
    """Spark 4.0 with Spark's own Kafka connector (the jars in ../shared/jvm-clients), in its own process."""
    require_connector()
    session = remote.RemoteSpark(tmp_path_factory.mktemp("spark40") / "spark.log")
    yield session
    session.close()


@pytest.fixture(params=CONNECTORS)
def jobs(request: pytest.FixtureRequest) -> Jobs:
    """The Spark operations of `operations.py`, through the fallback (python) or Spark's connector (jvm)."""
    return jobs_for(request, request.param)


def jobs_for(request: pytest.FixtureRequest, connector: str) -> Jobs:
    if connector == "jvm":
        return Jobs("jvm", request.getfixturevalue("spark40").call)
    spark = request.getfixturevalue("spark")
    return Jobs("python", lambda operation, *args, **kwargs: OPERATIONS[operation](spark, *args, **kwargs))


@pytest.fixture(scope="package")
def shop_events(spark: SparkSession, kafka: Kafka, spark_broker: BrokerProcess) -> list[Message]:
    """EVENT_COUNT generator events in a 3-partition topic, as written (read back with a plain consumer)."""
    kafka.create_topic(EVENTS_TOPIC, partitions=3)
    generate.generate(spark, job_args(bootstrap_servers=spark_broker.bootstrap, topic=EVENTS_TOPIC,
                                      count=EVENT_COUNT, start=EVENTS_START, events_per_second=100.0,
                                      jitter_ms=5000, seed=7))
    messages = kafka.read_all(EVENTS_TOPIC)
    assert len(messages) == EVENT_COUNT
    return messages


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
