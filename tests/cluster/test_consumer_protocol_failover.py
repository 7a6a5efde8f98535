"""A consumer-protocol (KIP-848) group across the failover of its coordinator in a three-broker cluster: the
new coordinator replays the ConsumerGroup* records, so the members keep their ids, epochs and partitions
and go on consuming without a revocation."""

from __future__ import annotations

from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from pybroker.coordinator.records import partition_for
from tests.eventually import eventually
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import create_topic, partition_states, wait_for_full_isr
from tests.integration.test_consumer_protocol_groups import Member, split

TOPIC = GROUP = "kip848-failover"
OFFSETS_PARTITIONS = 3  # offsets.topic.num.partitions in the cluster fixture


@pytest.fixture(scope="module")
def kip848_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("kip848"), extra={
            "group.consumer.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "10000"}) as running:
        yield running


def describe(bootstrap: str) -> dict[str, frozenset[int]]:
    """member id -> its partitions, as ConsumerGroupDescribe tells them."""
    client = AdminClient({"bootstrap.servers": bootstrap})
    described = client.describe_consumer_groups([GROUP])[GROUP].result(timeout=15)
    return {m.member_id: frozenset(tp.partition for tp in m.assignment.topic_partitions) for m in described.members}


def test_members_keep_their_assignment_across_a_coordinator_failover(kip848_cluster: Cluster) -> None:
    cluster = kip848_cluster
    create_topic(cluster, TOPIC, 6)
    members = [Member(cluster.bootstrap, GROUP, TOPIC) for _ in range(3)]
    offsets_partition = partition_for(GROUP, OFFSETS_PARTITIONS)
    coordinator = None
    try:
        eventually(lambda: split(members, [2, 2, 2]), "2/2/2")
        wait_for_full_isr(cluster, "__consumer_offsets")
        before = describe(cluster.bootstrap)
        assignments = [set(m.assignment) for m in members]
        for m in members:
            m.revoked.clear()
        coordinator_id = partition_states(cluster, "__consumer_offsets")[offsets_partition][0]
        coordinator = cluster.brokers[coordinator_id]
        coordinator.kill()
        eventually(lambda: partition_states(cluster, "__consumer_offsets")[offsets_partition][0]
                   not in (-1, coordinator_id), "a new coordinator")

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        sent = {f"after-{i}".encode() for i in range(60)}
        for value in sent:
            producer.produce(TOPIC, key=value, value=value)
        assert producer.flush(30) == 0
        eventually(lambda: {v for m in members for _, _, v, _ in m.consumed} >= sent,
                   "the members consuming after the failover", timeout=60)
        assert describe(cluster.bootstrap) == before
        assert [set(m.assignment) for m in members] == assignments
        assert all(m.revoked == [] for m in members), "nothing revoked across the failover"
    finally:
        for m in members:
            m.close()
        if coordinator is not None:
            coordinator.start()
