"""A leader left alone in the ISR keeps what acks=all acknowledged through a power loss (chaos round 6016).

The followers stop fetching, so the leader shrinks the ISR to itself (below min.insync.replicas). It then
loses power: SIGKILL, and every log cut back to its last fsync (the recovery-point checkpoint, as the
chaos harness's power loss does; chaos/disk.py). Being the only ISR member it is elected again when it
returns, and the followers truncate to its log. Kafka leaves fsync to the flush settings, so the
acknowledged records were on no disk; the leader now flushes them before the ISR shrinks below the
minimum."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from confluent_kafka import Producer
from kazoo.client import KazooClient

from chaos.disk import lose_unsynced_writes
from pybroker.controller import zk_paths as zp
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import consume, controller_id, create_topic, wait_for_full_isr
from tests.integration.groups_common import wait_until

TOPIC = "alone"
ACKED = 200


def zk_isr(cluster: Cluster) -> list[int]:
    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        return json.loads(zk.get(zp.partition_state_path(TOPIC, 0))[0])["isr"]
    finally:
        zk.stop()
        zk.close()


def test_acknowledged_records_survive_a_power_loss_of_the_leader_left_alone_in_the_isr(tmp_path: Path) -> None:
    with running_cluster(tmp_path, extra={"replica.lag.time.max.ms": "2000"}) as cluster:  # the leader is the controller
        [leader] = wait_until(lambda: [c for c in [controller_id(cluster)] if c >= 0], "a controller")
        followers = [b for b in range(3) if b != leader]
        create_topic(cluster, TOPIC, 1, assignment=[[leader, *followers]], **{"min.insync.replicas": "2"})
        wait_for_full_isr(cluster, TOPIC)

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        errors: list[object] = []
        for i in range(ACKED):
            producer.produce(TOPIC, f"m-{i}".encode(), partition=0,
                             on_delivery=lambda err, _: err is not None and errors.append(err))
        assert producer.flush(30) == 0 and errors == []

        for follower in followers:  # alive, registered, but no longer fetching
            os.kill(cluster.brokers[follower].process.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: zk_isr(cluster) == [leader], "the leader to shrink the ISR to itself", timeout=30)
            broker = cluster.brokers[leader]
            broker.kill()
            lose_unsynced_writes(broker.data_dir / "logs")
        finally:
            for follower in followers:
                os.kill(cluster.brokers[follower].process.pid, signal.SIGCONT)
        broker.start()

        values = consume(cluster, TOPIC, 1, ACKED)[0]
        assert values[:ACKED] == [f"m-{i}".encode() for i in range(ACKED)]
