"""A leader trusts a follower's fetch offset only when it could read from it, and a follower whose
fetch offset the leader refuses asks it where its log starts and ends (issue 15).

Two brokers: topic partitions are placed on [0, 1] with broker 0 leading. Broker 1 is killed, so
the ISR shrinks to [0] and the leader's log moves on without it (retention deletes its head).
"""

from __future__ import annotations

import json
import time
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from tests.eventually import eventually
from tests.cluster.conftest import Cluster, running_cluster
from tests.integration.test_bad_input import WireClient

BROKERS = 2
TOPIC = "followed"
FOLLOWER = 1
ISR_WATCH_S = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """ZooKeeper and two brokers whose retention runs every half second."""
    fast_retention = {"log.retention.check.interval.ms": "500"}
    with running_cluster(tmp_path_factory.mktemp("follower-fetch"), BROKERS, fast_retention) as running:
        yield running


def isr(cluster: Cluster) -> list[int]:
    """The partition's ISR as ZooKeeper holds it (the leader writes every change there)."""
    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        return sorted(json.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")[0])["isr"])
    finally:
        zk.stop()
        zk.close()


def list_offset(client: WireClient, timestamp: int) -> int:
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
    return client.request(request, 4, ListOffsetsResponse).topics[0].partitions[0].offset


def follower_fetch(client: WireClient, offset: int) -> FetchResponse.PartitionData:
    request = FetchRequest(replica_id=FOLLOWER, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                               FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                                           partition_max_bytes=1 << 20)])])
    return client.request(request, 12, FetchResponse).responses[0].partitions[0]


def test_refused_follower_fetches_move_no_isr_and_the_follower_restarts_at_the_leaders_log_start(
        cluster: Cluster) -> None:
    leader, follower = cluster.brokers
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[0, FOLLOWER]], config={
        "segment.bytes": "2048", "retention.bytes": "4096"})])[TOPIC].result(30)
    eventually(lambda: isr(cluster) == [0, FOLLOWER], "the follower in the ISR", 60)
    follower.kill()
    eventually(lambda: isr(cluster) == [0], "the killed follower out of the ISR", 60)
    producer = Producer({"bootstrap.servers": leader.bootstrap, "acks": 1, "batch.num.messages": 5})
    for i in range(200):
        producer.produce(TOPIC, value=b"x" * 200, key=str(i).encode())
    assert producer.flush(30) == 0
    client = WireClient(leader.bootstrap)
    try:
        log_start = eventually(lambda: list_offset(client, -2), "retention to delete the leader's log head", 30)
        log_end = list_offset(client, -1)
        for offset in (0, log_end + 10):
            refused = follower_fetch(client, offset)
            assert refused.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, offset
            assert (refused.high_watermark, refused.last_stable_offset, refused.log_start_offset) == (-1, -1, -1)
        # A fetch past the leader's end must not pass for a caught-up follower: no ISR expansion.
        deadline = time.monotonic() + ISR_WATCH_S
        while time.monotonic() < deadline:
            assert isr(cluster) == [0]
            time.sleep(0.2)
    finally:
        client.close()
    follower.start()
    eventually(lambda: isr(cluster) == [0, FOLLOWER], "the restarted follower back in the ISR", 60)
    assert any(f"Restarting {TOPIC}-0 at the leader 0's log start" in line for line in follower.log_lines), \
        f"the follower restarts at the leader's log start (>= {log_start})"
    assert "Traceback" not in follower.log_text() and "Traceback" not in leader.log_text()
