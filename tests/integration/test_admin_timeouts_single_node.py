"""On one broker without ZooKeeper every CreateTopics, CreatePartitions and DeleteTopics is done once started (its
metadata written, its logs made or deleted): with timeout_ms 0 or not, each topic of a request is answered with
its own error, NONE for those done, never REQUEST_TIMED_OUT, and what it did shows at once."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from pybroker.protocol.error_codes import ErrorCode
from tests.integration.admin_wire import create_partitions, create_topics, delete_topics
from tests.integration.broker_process import BrokerProcess

ABSENT_BROKER = 5


def _leaders(bootstrap: str) -> dict[str, list[int]]:
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return {name: [p.leader for _, p in sorted(t.partitions.items())] for name, t in topics.items()
            if not name.startswith("__")}


@pytest.mark.parametrize("timeout_ms", [0, 30000])
def test_each_topic_is_answered_its_own_error_and_done_at_once(shared_broker: BrokerProcess, timeout_ms: int) -> None:
    at = shared_broker.bootstrap
    made, refused = f"made-{timeout_ms}", f"refused-{timeout_ms}"
    assert create_topics(at, {made: [[0]], refused: [[ABSENT_BROKER]]}, timeout_ms) == {
        made: ErrorCode.NONE, refused: ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    assert _leaders(at).get(made) == [0]
    assert create_partitions(at, made, 3, [[0], [0]], timeout_ms) == ErrorCode.NONE
    assert _leaders(at).get(made) == [0, 0, 0]
    assert delete_topics(at, [made, refused], timeout_ms) == {
        made: ErrorCode.NONE, refused: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert made not in _leaders(at)
