"""ZooKeeper mode: CreateTopics, CreatePartitions and DeleteTopics apply their timeout_ms as Kafka's ZkAdminManager
does. Every topic of a request is started first; with timeout_ms <= 0 the answer comes at once (NONE for each one
started); otherwise the answer waits until each topic is done in the broker's metadata (created with leaders, or
gone), and names REQUEST_TIMED_OUT those still not done when timeout_ms passed, while their operation goes on.

Before this change each topic waited in turn, a fixed 10 s, and was answered NONE whether or not it was done.

The deletion held here is that of a topic being reassigned (its move cannot end: the only in-sync replica's broker
is down); the leaders not elected are those of topics created while the controller is frozen (SIGSTOP).

A client that goes away does not stop what it asked for (docs/cluster.md): it sends its request with a long
timeout_ms and closes the connection at once, so the broker sees it gone while the request's first topic is still
being written to ZooKeeper, and every topic of the request is still created, grown or deleted, as by Kafka's
ZkAdminManager, which starts them all on the request handler thread whatever the connection does. It failed at each
of the three steps (each seen failing alone) while the request's handler was cancelled with its connection."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from pybroker.protocol.error_codes import ErrorCode
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import controller_id, wait_for_full_isr
from tests.cluster.test_topic_deletion_pending import TOPIC, _move, _moving, _pending
from tests.eventually import eventually
from tests.integration.admin_wire import (
    create_partitions,
    create_partitions_request,
    create_topics,
    create_topics_request,
    delete_topics,
    delete_topics_request,
    send_and_leave,
)

FREE, ALSO_FREE = "free", "also-free"
#: longer than any freeze of the controller here: its ZooKeeper session outlives it
SESSION_TIMEOUT_MS = "30000"


def _leaders(cluster: Cluster, broker: int, name: str) -> list[int]:
    """The leader of each partition of ``name`` as ``broker`` answers Metadata."""
    admin = AdminClient({"bootstrap.servers": cluster.brokers[broker].bootstrap})
    topic = admin.list_topics(timeout=10).topics.get(name)
    return [] if topic is None or topic.error is not None else [p.leader for _, p in sorted(topic.partitions.items())]


def test_a_held_deletion_times_out_and_the_others_of_its_request_do_not_wait(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster:
        controller = controller_id(cluster)
        leader, target = [b for b in range(3) if b != controller]
        at_controller = cluster.brokers[controller].bootstrap
        plans = {TOPIC: [[leader]], FREE: [[controller]], ALSO_FREE: [[target], [controller]]}
        created = create_topics(at_controller, plans, 30000)
        assert created == dict.fromkeys((TOPIC, FREE, ALSO_FREE), ErrorCode.NONE)
        for name in created:
            wait_for_full_isr(cluster, name)
        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            cluster.brokers[leader].stop()  # the target cannot catch up: the move stays in progress
            assert _move(at_controller, [target]) == ErrorCode.NONE

            assert delete_topics(at_controller, [TOPIC, FREE, ALSO_FREE], 2000) == {
                TOPIC: ErrorCode.REQUEST_TIMED_OUT, FREE: ErrorCode.NONE, ALSO_FREE: ErrorCode.NONE}
            assert _moving(at_controller) == {f"{TOPIC}-0": [target, leader]}  # still held, and going on
            assert _pending(zk) == (True, True)
            assert _leaders(cluster, controller, FREE) == _leaders(cluster, controller, ALSO_FREE) == []

            def answered_at_once() -> tuple[dict[str, int], dict[str, list[int]]]:
                """timeout_ms=0 on the held topic (queued already, so tracked again as Kafka does): its answer,
                and the moves in progress right after it."""
                codes = delete_topics(at_controller, [TOPIC], 0)
                return codes, _moving(at_controller)

            with ThreadPoolExecutor(1) as pool:
                answer = pool.submit(answered_at_once)
                cluster.brokers[leader].start()  # the move can end now, and the deletion after it
                codes, moving = answer.result(60)
            assert codes == {TOPIC: ErrorCode.NONE}
            assert moving == {f"{TOPIC}-0": [target, leader]}  # answered before the held deletion could end
            eventually(lambda: _pending(zk) == (False, False), "the held deletion to end", timeout=60)
        finally:
            zk.stop()
            zk.close()


def test_creations_whose_leaders_are_not_elected_in_time_time_out(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2, extra={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS}) as cluster:
        controller = controller_id(cluster)
        other = 1 - controller
        at_other = cluster.brokers[other].bootstrap
        assert create_topics(at_other, {"grown": [[other]]}, 30000) == {"grown": ErrorCode.NONE}
        assert _leaders(cluster, other, "grown") == [other]
        frozen = cluster.brokers[controller].process
        assert frozen is not None
        os.kill(frozen.pid, signal.SIGSTOP)  # nobody elects leaders
        try:
            created = create_topics(at_other, {"created": [[other]], "also-created": [[other]]}, 1500)
            grown = create_partitions(at_other, "grown", 2, [[other]], 1500)
            at_once = create_topics(at_other, {"at-once": [[other]]}, 0)
            validated = create_topics(at_other, {"validated": [[other]]}, 30000, validate_only=True)
            unelected = _leaders(cluster, other, "at-once")
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        assert created == {"created": ErrorCode.REQUEST_TIMED_OUT, "also-created": ErrorCode.REQUEST_TIMED_OUT}
        assert grown == ErrorCode.REQUEST_TIMED_OUT
        assert at_once == {"at-once": ErrorCode.NONE}
        assert validated == {"validated": ErrorCode.NONE}
        assert unelected in ([], [-1])  # answered before its leader was elected
        # The operations went on: once the controller runs again, every new partition gets its leader.
        expected = {"created": [other], "also-created": [other], "grown": [other, other], "at-once": [other]}
        eventually(lambda: {name: _leaders(cluster, other, name) for name in expected} == expected,
                   "every new partition to have its leader")
        assert _leaders(cluster, other, "validated") == []


def _served(cluster: Cluster, name: str) -> list[int] | None:
    """The leader of each partition of ``name`` if every broker answers the same ones, all elected (>= 0)."""
    seen = [_leaders(cluster, broker, name) for broker in range(len(cluster.brokers))]
    return seen[0] if seen[0] and all(leader >= 0 for leader in seen[0]) and seen.count(seen[0]) == len(seen) else None


def test_a_client_that_goes_away_does_not_stop_what_it_asked_for(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        at = cluster.brokers[0].bootstrap
        plans = {f"left-{i}": [[i % 2, 1 - i % 2], [1 - i % 2, i % 2]] for i in range(4)}
        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            send_and_leave(at, create_topics_request(plans, 60000), 5)
            # About a second here; the wait that fails while the handlers are cancelled, kept short for that.
            created = eventually(lambda: all(_served(cluster, name) for name in plans) and
                                 {name: _served(cluster, name) for name in plans}, "every topic created with leaders",
                                 timeout=15)
            assert {name: [replicas[0] for replicas in plan] for name, plan in plans.items()} == created
            assert all(zk.exists(f"/brokers/topics/{name}") for name in plans)

            send_and_leave(at, create_partitions_request("left-0", 3, [[1, 0]], 60000), 1)
            eventually(lambda: _served(cluster, "left-0") == [0, 1, 1], "left-0 grown to 3 partitions with leaders")

            send_and_leave(at, delete_topics_request(list(plans), 60000), 4)
            eventually(lambda: not any(zk.exists(f"/brokers/topics/{name}") or zk.exists(f"/admin/delete_topics/{name}")
                                       for name in plans), "every topic's znodes deleted")
            eventually(lambda: not any(_leaders(cluster, broker, name) for broker in range(2) for name in plans),
                       "no broker serving the deleted topics")
        finally:
            zk.stop()
            zk.close()
