"""Acknowledged records survive power losses of ISR members (chaos seed 6, rounds 6016, 7001 and 8015).

First test: a leader left alone in the ISR keeps what acks=all acknowledged through a power loss.

The followers stop fetching, so the leader shrinks the ISR to itself (below min.insync.replicas). It then
loses power: SIGKILL, and every log cut back to its last fsync (the recovery-point checkpoint, as the
chaos harness's power loss does; chaos/disk.py). Being the only ISR member it is elected again when it
returns, and the followers truncate to its log. Kafka leaves fsync to the flush settings, so the
acknowledged records were on no disk; the leader now flushes its log before the ISR shrinks below the
minimum, all of it: records above its high watermark may have been acknowledged by a previous leader.

Second test: every ISR member goes down at once, one losing power and one only killed; the killed one
is back first, and the one that lost power, which the controller used to wait for, is elected only if
its log is the longer.

Third test: chaos seed 6, the leader that is also the controller loses power and is back before its
ZooKeeper session expired."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Callable, TypeVar

from confluent_kafka import Producer
from kazoo.client import KazooClient

from chaos.disk import lose_unsynced_writes
from pybroker.zk import paths as zp
from tests.eventually import eventually
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import consume, controller_id, create_topic, wait_for_full_isr, zk_leader_epoch

T = TypeVar("T")
TOPIC = "alone"
ACKED = 200
ABOVE = 30


def zk_read(cluster: Cluster, read: Callable[[KazooClient], T]) -> T:
    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        return read(zk)
    finally:
        zk.stop()
        zk.close()


def zk_isr(cluster: Cluster, topic: str = TOPIC) -> list[int]:
    return json.loads(zk_read(cluster, lambda zk: zk.get(zp.partition_state_path(topic, 0))[0]))["isr"]


def produce_above_the_high_watermark(cluster: Cluster, topic: str) -> None:
    """Records the leader holds above its high watermark (acks=1, the followers do not fetch): they stand for
    what a previous leader acknowledged above a new leader's high watermark, which lags until the followers
    fetch again (chaos round 8015 lost 2 such records when the leader flushed only up to its watermark)."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
    for i in range(ABOVE):
        producer.produce(topic, f"above-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def produce_acknowledged(cluster: Cluster, topic: str, prefix: str = "m") -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[object] = []
    for i in range(ACKED):
        producer.produce(topic, f"{prefix}-{i}".encode(), partition=0,
                         on_delivery=lambda err, _: err is not None and errors.append(err))
    assert producer.flush(30) == 0 and errors == []


def hold_controller_znode(zk: KazooClient, dead: int) -> None:
    """Replace a dead broker's registration and /controller (its session's, until ZooKeeper expires it) by a
    /controller of this client's session naming it still, so that no broker is elected until it is deleted."""
    data = zk.get(zp.CONTROLLER)[0]
    assert json.loads(data)["brokerid"] == dead
    transaction = zk.transaction()
    transaction.delete(zp.broker_path(dead))
    transaction.delete(zp.CONTROLLER)
    transaction.create(zp.CONTROLLER, data, ephemeral=True)
    assert all(result is True or isinstance(result, str) for result in transaction.commit())


def test_acknowledged_records_survive_a_power_loss_of_the_leader_left_alone_in_the_isr(tmp_path: Path) -> None:
    with running_cluster(tmp_path, extra={"replica.lag.time.max.ms": "2000"}) as cluster:  # the leader is the controller
        [leader] = eventually(lambda: [c for c in [controller_id(cluster)] if c >= 0], "a controller")
        followers = [b for b in range(3) if b != leader]
        create_topic(cluster, TOPIC, 1, assignment=[[leader, *followers]], **{"min.insync.replicas": "2"})
        wait_for_full_isr(cluster, TOPIC)

        produce_acknowledged(cluster, TOPIC)

        for follower in followers:  # alive, registered, but no longer fetching
            os.kill(cluster.brokers[follower].process.pid, signal.SIGSTOP)
        try:
            produce_above_the_high_watermark(cluster, TOPIC)
            eventually(lambda: zk_isr(cluster) == [leader], "the leader to shrink the ISR to itself", timeout=30)
            broker = cluster.brokers[leader]
            broker.kill()
            lose_unsynced_writes(broker.data_dir / "logs")
        finally:
            for follower in followers:
                os.kill(cluster.brokers[follower].process.pid, signal.SIGCONT)
        broker.start()

        values = consume(cluster, TOPIC, 1, ACKED + ABOVE)[0]
        assert values == [f"m-{i}".encode() for i in range(ACKED)] + [f"above-{i}".encode() for i in range(ABOVE)]


def test_the_longest_log_leads_when_the_isr_member_back_first_lost_power(tmp_path: Path) -> None:
    """Chaos round 7001: ISR [a, b]. The controller, b (killed: its log is intact, the page cache kept
    it) and a (power loss: its log cut to its last fsync) go down at once, so no controller writes
    anything in between. b comes back first and becomes the controller: it sees itself registered
    after the state was written, and a away. It used to wait for a, the member that had not restarted, and
    elect it; b then truncated every acknowledged record to a's cut log. It now waits for both and
    elects the longer log."""
    topic = "cut"
    with running_cluster(tmp_path) as cluster:
        controller = eventually(lambda: [c for c in [controller_id(cluster)] if c >= 0], "a controller")[0]
        a, b = [broker for broker in range(3) if broker != controller]
        create_topic(cluster, topic, 1, assignment=[[a, b]], **{"min.insync.replicas": "2"})
        wait_for_full_isr(cluster, topic)
        produce_acknowledged(cluster, topic)
        epoch = zk_leader_epoch(cluster, topic)

        for broker in (controller, b, a):
            cluster.brokers[broker].kill()
        lose_unsynced_writes(cluster.brokers[a].data_dir / "logs")
        eventually(lambda: zk_read(cluster, lambda zk: zk.get_children(zp.BROKER_IDS)) == [],
                   "the killed brokers' sessions to expire", timeout=30)
        cluster.brokers[b].start()  # b is the controller now: registered before its failover
        eventually(lambda: zk_leader_epoch(cluster, topic) > epoch, "the new controller to handle cut-0")
        cluster.brokers[a].start()
        cluster.brokers[controller].start()

        values = consume(cluster, topic, 1, ACKED)[0]
        assert values[:ACKED] == [f"m-{i}".encode() for i in range(ACKED)]
        assert zk_isr(cluster, topic)[0] == b  # b led: it had the longer log


def test_a_leader_and_controller_registered_again_before_the_next_controller_loses_nothing(tmp_path: Path) -> None:
    """Chaos seed 6 (kill two, then power loss of the leader that is also the controller). Two brokers are
    killed and come back, so the one left leads and controls. It then loses power and restarts, and its new
    registration is in ZooKeeper before the next controller is elected: with a 4 s session and a restart
    within it, the old session's expiry frees /brokers/ids/N and /controller together and the restarted
    broker may register before the election's failover reads the brokers ("now and then"). Here that order
    is made, not waited for: the dead session's registration and /controller are deleted and the test holds a
    /controller of its own naming the dead broker (as the dead session's did until it expired) while the broker
    restarts and registers; only then is it deleted. The next controller finds the broker live and named leader; before 980639d it kept it
    leader at the same epoch with its log cut to the last fsync, and the followers truncated the acknowledged
    tail to it. Its registration is newer than the partition state's last write, so it is now handled as
    bounced and a follower leads."""
    topic = "seed6"
    with running_cluster(tmp_path, extra={"replica.lag.time.max.ms": "2000"}) as cluster:
        leader = eventually(lambda: [c for c in [controller_id(cluster)] if c >= 0], "a controller")[0]
        followers = [b for b in range(3) if b != leader]
        create_topic(cluster, topic, 1, assignment=[[leader, *followers]], **{"min.insync.replicas": "2"})
        wait_for_full_isr(cluster, topic)
        produce_acknowledged(cluster, topic, "a")

        for follower in followers:  # kill two: the leader, also the controller, is left alone in the ISR
            cluster.brokers[follower].kill()
        eventually(lambda: zk_isr(cluster, topic) == [leader], "the ISR to shrink to the leader", timeout=30)
        for follower in followers:
            cluster.brokers[follower].start()
        wait_for_full_isr(cluster, topic)
        produce_acknowledged(cluster, topic, "b")  # on the followers' logs, in no fsync of the leader's
        assert controller_id(cluster) == leader

        broker = cluster.brokers[leader]
        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            broker.kill()
            cut = lose_unsynced_writes(broker.data_dir / "logs")
            assert cut.get(f"{topic}-0"), f"the power loss cut nothing of {topic}-0: {cut}"
            hold_controller_znode(zk, leader)
            broker.start()  # registered again; /controller names it, so nobody stands for controller
            zk.delete(zp.CONTROLLER)
        finally:
            zk.stop()
            zk.close()

        values = consume(cluster, topic, 1, 2 * ACKED)[0]
        assert values == [f"{prefix}-{i}".encode() for prefix in "ab" for i in range(ACKED)]
