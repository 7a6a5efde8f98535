"""DeleteRecords in a cluster (ZooKeeper, three brokers): the leader's new log start reaches the followers
through their fetches, each follower raises its own (retention then deletes its segments below it and its
log-start-offset-checkpoint takes it), and the answer waits for them: with timeout_ms 0 it is
REQUEST_TIMED_OUT with the low watermark before the followers moved, then the low watermark itself."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.error_codes import ErrorCode
from tests.eventually import eventually
from tests.cluster.conftest import BROKERS, Cluster, running_cluster
from tests.integration.test_bad_input import WireClient
from tests.integration.test_delete_records import checkpointed_start, delete, segment_bases, watermarks

TOPIC = "deleted-across"
LEADER = 0
COUNT = 300
TARGET = 150


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """ZooKeeper and three brokers whose retention and checkpoints run every 300 ms."""
    fast = {"log.retention.check.interval.ms": "300", "file.delete.delay.ms": "0",
            "log.flush.offset.checkpoint.interval.ms": "300",
            "log.flush.start.offset.checkpoint.interval.ms": "300"}
    with running_cluster(tmp_path_factory.mktemp("delete-records"), BROKERS, fast) as running:
        yield running


def test_followers_follow_the_log_start_and_the_answer_waits_for_them(cluster: Cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[LEADER, 1, 2]],
                                  config={"segment.bytes": "1024"})])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.num.messages": 10,
                         "linger.ms": 5})
    for i in range(COUNT):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    dirs = [Path(b.data_dir) / "logs" / f"{TOPIC}-0" for b in cluster.brokers]
    for log_dir in dirs:  # every replica holds all the segments from 0
        eventually(lambda: segment_bases(log_dir)[:1] == [0] and len(segment_bases(log_dir)) > 5,
                   f"{log_dir} to hold the records")

    client = WireClient(cluster.brokers[LEADER].bootstrap)
    try:
        # The leader moved at once; its followers learn it from their next fetch answer: not yet.
        assert delete(client, {(TOPIC, 0): TARGET}, timeout_ms=0) == {
            (TOPIC, 0): (ErrorCode.REQUEST_TIMED_OUT, 0)}
        # Answered within its timeout once the followers' next fetches carried the new start (a timeout would
        # answer REQUEST_TIMED_OUT).
        assert delete(client, {(TOPIC, 0): TARGET}, timeout_ms=30000) == {(TOPIC, 0): (ErrorCode.NONE, TARGET)}
    finally:
        client.close()
    assert watermarks(cluster.brokers[LEADER].bootstrap, TOPIC) == (TARGET, COUNT)

    # Every replica deletes its segments below the start and checkpoints the start.
    for broker, log_dir in zip(cluster.brokers, dirs):
        eventually(lambda: segment_bases(log_dir)[0] <= TARGET < (segment_bases(log_dir)[1:] or [COUNT + 1])[0],
                   f"retention on broker {broker.port}")
        eventually(lambda: checkpointed_start(Path(broker.data_dir) / "logs", TOPIC) == TARGET,
                   f"log-start-offset-checkpoint of broker {broker.port}")
