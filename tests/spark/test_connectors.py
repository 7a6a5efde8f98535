"""The two Kafka connectors the jobs can run on are the ones the tests say, and they write alike: the generator
gives the same records at the same partitions and offsets through both (keys partitioned by murmur2, as Kafka's
default partitioner), and rows with a `topic` column go where Spark's sink sends them."""

from __future__ import annotations

import pytest
from kafka.partitioner.default import murmur2

from pybroker.spark_jobs.kafka_format import JVM_PROVIDER
from pybroker.spark_jobs.kafka_source.options import FALLBACK_NAME
from tests.integration.broker_process import BrokerProcess
from tests.spark.conftest import CONNECTORS, EVENTS_START, jobs_for
from tests.spark.support import Jobs, Kafka, job_args


def test_each_connector_is_the_one_named(jobs: Jobs) -> None:
    name, provider, version = jobs("connector")
    if jobs.connector == "jvm":
        assert (name, provider) == ("kafka", JVM_PROVIDER) and version.startswith("4.0.")
    else:
        assert name == FALLBACK_NAME and provider != JVM_PROVIDER


def test_generator_writes_the_same_records_through_both_connectors(request: pytest.FixtureRequest, kafka: Kafka,
                                                                  spark_broker: BrokerProcess) -> None:
    written = {}
    for connector in CONNECTORS:
        topic = f"generated-{connector}"
        kafka.create_topic(topic, partitions=3)
        jobs_for(request, connector)("generate", vars(job_args(
            bootstrap_servers=spark_broker.bootstrap, topic=topic, count=5000, start=EVENTS_START,
            events_per_second=100.0, jitter_ms=5000, seed=3)))
        written[connector] = sorted((m.partition, m.offset, m.key, m.value) for m in kafka.read_all(topic))
    assert len(written["python"]) == 5000
    assert written["python"] == written["jvm"]
    assert all(partition == (murmur2(key) & 0x7FFFFFFF) % 3 for partition, _, key, _ in written["jvm"])


def test_rows_with_a_topic_column(jobs: Jobs, kafka: Kafka, spark_broker: BrokerProcess) -> None:
    first, second, chosen = (f"{name}-{jobs.connector}" for name in ("to-first", "to-second", "to-chosen"))
    for topic in (first, second, chosen):
        kafka.create_topic(topic, partitions=2)
    rows = [{"topic": first, "key": "a", "value": "1", "partition": 1, "headers": [{"key": "h", "value": b"x"}]},
            {"topic": second, "key": "b", "value": "2", "partition": 0, "headers": []},
            {"topic": first, "key": "c", "value": "3", "partition": 1, "headers": []}]
    servers = {"kafka.bootstrap.servers": spark_broker.bootstrap}
    jobs("write", rows, servers)
    # Spark writes the rows from parallel tasks, so only their partitions, not their order, are given.
    assert sorted((m.partition, m.key, m.value) for m in kafka.read_all(first)) == [(1, b"a", b"1"), (1, b"c", b"3")]
    assert [(m.partition, m.key, m.value) for m in kafka.read_all(second)] == [(0, b"b", b"2")]

    jobs("write", rows, {**servers, "topic": chosen})  # the topic option overrides the column
    assert sorted((m.partition, m.key) for m in kafka.read_all(chosen)) == [(0, b"b"), (1, b"a"), (1, b"c")]

    with pytest.raises(Exception, match="null topic present in the data"):
        jobs("write", [{"topic": None, "key": "d", "value": "4"}], servers)
