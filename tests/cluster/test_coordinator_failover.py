"""Coordinators follow leadership of their internal-topic partition across a real three-broker cluster.

The broker leading a consumer group's partition of ``__consumer_offsets`` is SIGKILLed; the
controller elects another replica, which loads the partition, and the group resumes from exactly
the committed positions on the new coordinator.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker.coordinator.records import partition_for
from pybroker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from tests.eventually import eventually
from tests.cluster.conftest import Cluster
from tests.cluster.test_cluster import create_topic, partition_states, wait_for_full_isr
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

TOPIC = "failover-input"
PARTITIONS = 3
MESSAGES = 60
OFFSETS_PARTITIONS = 3  # offsets.topic.num.partitions in the cluster fixture


def _consumer(cluster: Cluster, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000})


def _read(consumer: Consumer, count: int) -> list[tuple[int, int]]:
    """(partition, offset) of the next ``count`` messages."""
    read: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while len(read) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(read), timeout=1.0):
            assert message.error() is None, message.error()
            read.append((message.partition(), message.offset()))
    return read


def _log_end(broker: BrokerProcess, partition: int, replica_id: int) -> int:
    """The latest offset of an offsets partition as ``broker`` answers ListOffsets: its own log end for
    the debugging replica id (-2), the high watermark for a consumer (-1, on the leader only)."""
    client = WireClient(broker.bootstrap)
    try:
        request = ListOffsetsRequest(replica_id=replica_id, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name="__consumer_offsets", partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])])
        return client.request(request, 4, ListOffsetsResponse).topics[0].partitions[0].offset
    finally:
        client.sock.close()


def _replicas_hold_the_log(cluster: Cluster, partition: int) -> bool:
    """Every replica of an offsets partition has the leader's whole log and the high watermark covers it."""
    leader, replicas, _ = partition_states(cluster, "__consumer_offsets")[partition]
    ends = {_log_end(cluster.brokers[r], partition, -2) for r in replicas}
    return len(ends) == 1 and ends.pop() == _log_end(cluster.brokers[leader], partition, -1) > 0


def test_group_keeps_committed_offsets_when_its_coordinator_is_killed(cluster: Cluster) -> None:
    create_topic(cluster, TOPIC, PARTITIONS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(MESSAGES):
        producer.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    group = "failover-group"
    first = _consumer(cluster, group)
    first.subscribe([TOPIC])
    consumed = _read(first, MESSAGES // 2)
    assert len(consumed) == MESSAGES // 2
    committed = {p: o + 1 for p, o in sorted(consumed)}
    first.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in committed.items()], asynchronous=False)
    first.close()

    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    wait_for_full_isr(cluster, "__consumer_offsets")
    eventually(lambda: _replicas_hold_the_log(cluster, offsets_partition), "the commit to be replicated")
    coordinator_id = partition_states(cluster, "__consumer_offsets")[offsets_partition][0]
    coordinator = cluster.brokers[coordinator_id]
    coordinator.kill()
    try:
        eventually(lambda: partition_states(cluster, "__consumer_offsets")[offsets_partition][0]
                   not in (-1, coordinator_id), "a new leader of the group's offsets partition")
        second = _consumer(cluster, group)
        stored = second.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        assert {tp.partition: tp.offset for tp in stored if tp.partition in committed} == committed
        second.subscribe([TOPIC])
        resumed = _read(second, MESSAGES - len(consumed))
        second.close()
    finally:
        coordinator.start()
    per_partition = MESSAGES // PARTITIONS
    for partition in range(PARTITIONS):  # every position after the committed one, once: none lost or repeated
        assert sorted(o for p, o in resumed if p == partition) == \
            list(range(committed.get(partition, 0), per_partition))
