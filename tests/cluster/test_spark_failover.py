"""A Spark streaming job keeps going when the leader of one of its input partitions is SIGKILLed, and its
output is exact: `pybroker/spark_jobs/archive.py` (Parquet file sink with a checkpoint, exactly once) runs under
spark-submit against the three-broker cluster while an idempotent acks=all producer writes N messages; the
leader of partition 0 dies mid-stream, after the query has committed a batch. The same query (no restart) must
archive every acknowledged message exactly once. Through Spark's JVM connector and through the Python fallback.

The archive is read as Spark reads it: only the files its `_spark_metadata` log lists (a batch that was written
but not committed leaves files outside it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from tests.eventually import eventually
from tests.cluster.conftest import Cluster
from tests.cluster.test_cluster import create_topic, partition_states, wait_for_full_isr
from tests.spark.support import require_connector
from tests.spark.test_archive import submit

MESSAGES = 2000
BEFORE_KILL = 500  # produced (and partly archived) before the leader dies
PACE_S = 0.004  # between later messages, so the kill lands mid-stream
# Offsets per micro-batch: batches keep running through the kill either way (the stream is paced), and each costs
# the Python fallback 3-5 s of fixed work, so at 400 its catching up after the kill took eight of them.
PER_TRIGGER = "1000"
# Spark's driver asks offsets through the Java admin, which keeps a ListOffsets call queued for the leader just
# killed on that node id (reconnecting, then, once the node leaves the metadata, waiting for it to return) until
# default.api.timeout.ms (60 s) before Spark retries it with a new admin. Shorter timeouts keep the test short; the
# wait is the client's. 8 s: the first attempt always waits it out, the second (Spark makes fetchOffset.numRetries,
# 3, attempts) starts 8 s after the kill, by when the controller has moved the leader (the sessions expire in 4 s).
JVM_ADMIN_TIMEOUTS = ["--kafka-option", "default.api.timeout.ms=8000", "--kafka-option", "request.timeout.ms=5000"]
# From the last acknowledgement to a complete archive.
CATCH_UP_S = 60


def archived_files(path: Path) -> set[Path]:
    """The Parquet files the file sink committed: the "add" entries of its metadata log (compacted or not)."""
    log_dir = path / "_spark_metadata"
    added: set[Path] = set()
    removed: set[Path] = set()
    if not log_dir.is_dir():
        return added
    for entry in log_dir.iterdir():
        if entry.name.startswith(".") or not entry.name.split(".")[0].isdigit():
            continue  # temporary files of an in-flight commit
        for line in entry.read_text().splitlines()[1:]:  # line 1 is the log's version
            if line.strip():
                record = json.loads(line)
                (added if record["action"] == "add" else removed).add(Path(urlparse(record["path"]).path))
    return added - removed


def archived_values(path: Path) -> list[bytes]:
    return [value for file in archived_files(path)
            for value in pq.read_table(file, columns=["value"]).column("value").to_pylist()]


def archived_count(path: Path) -> int:
    return sum(pq.ParquetFile(file).metadata.num_rows for file in archived_files(path))


class PacedProducer:
    """Idempotent acks=all producer of `spark-<i>` (key `k-<i>`) from a thread; records acks and failures."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 50,
                                  "topic.metadata.refresh.interval.ms": 500})
        self.acked: list[bytes] = []
        self.failed: list[object] = []
        self._thread: threading.Thread | None = None

    def _on_delivery(self, err, message) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.failed.append(err)
        else:
            self.acked.append(message.value())

    def produce(self, first: int, end: int, pace_s: float = 0.0) -> None:
        for i in range(first, end):
            self.producer.produce(self.topic, f"spark-{i}".encode(), key=f"k-{i}".encode(),
                                  on_delivery=self._on_delivery)
            self.producer.poll(pace_s)
        assert self.producer.flush(90) == 0

    def start(self, first: int, end: int, pace_s: float) -> None:
        self._thread = threading.Thread(target=self.produce, args=(first, end, pace_s))
        self._thread.start()

    def join(self) -> None:
        assert self._thread is not None
        self._thread.join(120)
        assert not self._thread.is_alive(), "the producer did not finish"


@pytest.mark.parametrize("connector", ["jvm", "python"])
def test_streaming_query_survives_a_leader_kill_and_archives_each_message_once(
        connector: str, cluster: Cluster, tmp_path: Path) -> None:
    if connector == "jvm":
        require_connector()
    started = time.perf_counter()
    topic = f"spark-failover-{connector}"
    create_topic(cluster, topic, 3, **{"min.insync.replicas": "2"})
    leader = wait_for_full_isr(cluster, topic)[0][0]
    path, checkpoint, log = tmp_path / "archive", tmp_path / "checkpoint", tmp_path / "archive.log"
    producer = PacedProducer(cluster.bootstrap, topic)
    producer.produce(0, BEFORE_KILL)

    job = submit(connector, log, ["--bootstrap-servers", cluster.bootstrap, "--topic", topic, "--path", str(path),
                                  "--checkpoint", str(checkpoint), "--max-offsets-per-trigger", PER_TRIGGER,
                                  *(JVM_ADMIN_TIMEOUTS if connector == "jvm" else [])])
    killed: int | None = None
    try:
        def archived_some() -> bool:
            assert job.poll() is None, f"the job exited:\n{log.read_text()[-3000:]}"
            return archived_count(path) > 0
        eventually(archived_some, "a first committed batch", timeout=120, interval=0.2)
        job_up = time.perf_counter()

        producer.start(BEFORE_KILL, MESSAGES, PACE_S)
        eventually(lambda: len(producer.acked) >= BEFORE_KILL + 200, "200 acknowledgements after the job started")
        cluster.brokers[leader].kill()
        killed = leader
        killed_at = time.perf_counter()
        producer.join()
        assert producer.failed == [] and len(producer.acked) == MESSAGES
        new_leader = partition_states(cluster, topic)[0][0]
        assert new_leader not in (leader, -1)

        def archived_all() -> bool:
            assert job.poll() is None, f"the job exited after the leader's kill:\n{log.read_text()[-3000:]}"
            return archived_count(path) >= MESSAGES
        eventually(archived_all, lambda: f"{MESSAGES} archived messages, {archived_count(path)} so far",
                   timeout=CATCH_UP_S, interval=0.2)
        done_at = time.perf_counter()
        assert job.poll() is None, "the query stopped"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        if killed is not None:
            cluster.brokers[killed].start()

    values = archived_values(path)
    assert not [v for v, n in Counter(values).items() if n > 1], "duplicates in the archive"
    assert sorted(values) == sorted(producer.acked)
    wait_for_full_isr(cluster, topic)  # the killed broker rejoins, leaving the cluster whole for the next test
    print(f"\n{connector}: job up (first batch) {job_up - started:.1f} s after the start; leader {leader} killed, "
          f"all {MESSAGES} archived {done_at - killed_at:.1f} s later; test {time.perf_counter() - started:.1f} s")


def test_the_python_source_asks_a_moved_leader_again_for_the_log_start(cluster: Cluster,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """An executor's metadata names the old leader, which answers NOT_LEADER_OR_FOLLOWER: retriable in Kafka
    (an InvalidMetadataException), so the source refreshes its metadata and asks the new leader."""
    from confluent_kafka import Consumer, TopicPartition
    from pybroker.client.admin import AdminClient as Admin
    from pybroker.client.cluster import KafkaClient
    from pybroker.common.topic import TopicPartition as AdminPartition
    from pybroker.spark_jobs.kafka_source.options import source_options
    from pybroker.spark_jobs.kafka_source.reader import _low_watermark

    topic = "spark-moved-leader"
    create_topic(cluster, topic, 1, assignment=[[0, 1]])
    wait_for_full_isr(cluster, topic)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "moved-leader"})
    try:
        assert consumer.list_topics(topic, timeout=10).topics[topic].partitions[0].leader == 0  # cached

        async def move() -> None:
            async with KafkaClient(cluster.bootstrap) as client:
                admin = Admin(client)
                assert not any((await admin.alter_partition_reassignments({AdminPartition(topic, 0): [1, 0]})).values())
                assert not any((await admin.elect_leaders(0, [AdminPartition(topic, 0)])).values())

        asyncio.run(move())
        for broker in cluster.brokers[:2]:  # the old leader knows it no longer leads
            eventually(lambda: partition_states(Cluster(cluster.zookeeper, [broker]), topic)[0][0] == 1,
                       f"broker {broker.port} to name broker 1 the leader")
        options = source_options({"subscribe": topic, "kafka.bootstrap.servers": cluster.bootstrap},
                                 streaming=False)
        with caplog.at_level(logging.INFO, logger="pybroker.spark_jobs.kafka_source.reader"):
            assert _low_watermark(consumer, TopicPartition(topic, 0), options) == 0
        assert any("asking again" in record.getMessage() for record in caplog.records)
    finally:
        consumer.close()
