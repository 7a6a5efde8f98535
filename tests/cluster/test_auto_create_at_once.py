"""ZooKeeper mode: a Metadata request that auto-creates a topic is answered at once, as Kafka's KafkaApis answers it
(AutoTopicCreationManager writes the topic with timeout 0): LEADER_NOT_AVAILABLE and no partitions for the new topic,
the other topics of the request as they are; the client asks again and sees the leaders once the controller has
elected them. A topic already written but not yet known to the broker is answered LEADER_NOT_AVAILABLE again when the
request may create it, UNKNOWN_TOPIC_OR_PARTITION when it may not. FindCoordinator answers COORDINATOR_NOT_AVAILABLE at
once for the internal topic it starts creating. A confluent-kafka producer to a new topic still delivers.

Before this change the request waited up to 10 s for the new topic's leaders (holding the whole answer) and then
described it with error NONE and leaderless partitions.

The leaders not elected are those of topics created while the controller is frozen (SIGSTOP)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Iterator

from confluent_kafka import KafkaError, Message, Producer

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_admin_timeouts import SESSION_TIMEOUT_MS
from tests.cluster.test_cluster import controller_id
from tests.eventually import eventually
from tests.integration.admin_wire import SOCKET_TIMEOUT_S, create_topics
from tests.integration.test_bad_input import WireClient

PRESENT, FRESH, PRODUCED = "present", "fresh", "produced"


def _metadata(bootstrap: str, names: list[str], create: bool) -> dict[str, MetadataResponse.MetadataResponseTopic]:
    """Metadata v9 for ``names``, each topic's answer by name."""
    client = WireClient(bootstrap)
    client.sock.settimeout(SOCKET_TIMEOUT_S)
    try:
        answer = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                                                allow_auto_topic_creation=create), 9, MetadataResponse)
    finally:
        client.close()
    return {t.name: t for t in answer.topics}


def _coordinator(bootstrap: str, group: str) -> tuple[int, int]:
    """FindCoordinator v3 of ``group``: its error code and node id."""
    client = WireClient(bootstrap)
    client.sock.settimeout(SOCKET_TIMEOUT_S)
    try:
        answer = client.request(FindCoordinatorRequest(key=group, key_type=0), 3, FindCoordinatorResponse)
    finally:
        client.close()
    return int(answer.error_code), answer.node_id


def _leaders(topic: MetadataResponse.MetadataResponseTopic) -> tuple[int, list[int]]:
    return int(topic.error_code), [p.leader_id for p in sorted(topic.partitions, key=lambda p: p.partition_index)]


@contextlib.contextmanager
def controller_frozen(cluster: Cluster, topic: str) -> Iterator[tuple[int, str]]:
    """In a two-broker cluster: ``topic`` created on the broker that is not the controller, then the controller
    frozen (SIGSTOP) so that nobody elects a new topic's leaders; yields that other broker's id and address. The
    controller goes on at the end."""
    controller = controller_id(cluster)
    other = 1 - controller
    at_other = cluster.brokers[other].bootstrap
    assert create_topics(at_other, {topic: [[other]]}, 30000) == {topic: ErrorCode.NONE}
    frozen = cluster.brokers[controller].process
    assert frozen is not None
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        yield other, at_other
    finally:
        os.kill(frozen.pid, signal.SIGCONT)


def test_auto_creation_answers_at_once_and_a_retry_sees_the_leaders(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2, extra={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS}) as cluster:
        with controller_frozen(cluster, PRESENT) as (other, at_other):
            first = _metadata(at_other, [PRESENT, FRESH], create=True)
            again = _metadata(at_other, [FRESH], create=True)
            not_created = _metadata(at_other, [FRESH], create=False)
            coordinator = _coordinator(at_other, "a-group")
        assert _leaders(first[PRESENT]) == (ErrorCode.NONE, [other])  # the rest of the request is answered
        assert _leaders(first[FRESH]) == (ErrorCode.LEADER_NOT_AVAILABLE, [])  # written, not waited for
        assert _leaders(again[FRESH]) == (ErrorCode.LEADER_NOT_AVAILABLE, [])  # found in ZooKeeper, still unknown here
        assert _leaders(not_created[FRESH]) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
        assert coordinator == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)

        def elected() -> bool:
            code, leaders = _leaders(_metadata(at_other, [FRESH], create=True)[FRESH])
            return code == ErrorCode.NONE and bool(leaders) and all(leader in (0, 1) for leader in leaders)
        eventually(elected, "a retry to see the new topic's leaders")
        eventually(lambda: _coordinator(at_other, "a-group")[0] == ErrorCode.NONE, "the group's coordinator")

        errors: list[KafkaError | None] = []  # a client that retries its Metadata still delivers to a new topic

        def delivered(error: KafkaError | None, _message: Message) -> None:
            errors.append(error)
        producer = Producer({"bootstrap.servers": at_other, "message.timeout.ms": 30000})
        producer.produce(PRODUCED, b"value", on_delivery=delivered)
        assert producer.flush(60) == 0
        assert errors == [None]

