"""Transactions across a real three-broker cluster: the coordinator sends WriteTxnMarkers to the
leaders of the partitions it does not lead, and a transaction survives the loss of its coordinator.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from pybroker.coordinator.records import partition_for
from tests.eventually import eventually
from tests.cluster.conftest import Cluster
from tests.cluster.test_cluster import create_topic, partition_states, wait_for_full_isr

PARTITIONS = 3
PER_PARTITION = 20
TXN_PARTITIONS = 3  # transaction.state.log.num.partitions in the cluster fixture


def _producer(cluster: Cluster, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    return producer


def _send(producer: Producer, topic: str, label: str) -> None:
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(topic, value=f"{label}-{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def _values(cluster: Cluster, topic: str, isolation: str, expected: int) -> list[str]:
    """Every value of ``topic`` a consumer with ``isolation`` sees, waiting for ``expected`` of them."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[str] = []
    deadline = time.monotonic() + 60
    while len(values) < expected and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=1.0):
            assert message.error() is None, message.error()
            values.append(message.value().decode())
    for message in consumer.consume(1000, timeout=2.0):  # nothing beyond what was expected
        values.append(message.value().decode())
    consumer.close()
    return values


def _expected(labels: list[str]) -> list[str]:
    return [f"{label}-{p}-{i}" for label in labels for p in range(PARTITIONS) for i in range(PER_PARTITION)]


def test_a_transaction_over_partitions_of_every_broker_commits_and_aborts(cluster: Cluster) -> None:
    topic = "txn-spread"
    create_topic(cluster, topic, PARTITIONS)
    leaders = {leader for leader, _, _ in wait_for_full_isr(cluster, topic).values()}
    assert len(leaders) == 3  # so two of the three partitions are led by brokers other than the coordinator

    producer = _producer(cluster, "spread-txn")
    for label, commit in (("first", True), ("aborted", False), ("second", True)):
        producer.begin_transaction()
        _send(producer, topic, label)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    committed = _values(cluster, topic, "read_committed", 2 * PARTITIONS * PER_PARTITION)
    assert sorted(committed) == sorted(_expected(["first", "second"]))
    everything = _values(cluster, topic, "read_uncommitted", 3 * PARTITIONS * PER_PARTITION)
    assert sorted(everything) == sorted(_expected(["first", "aborted", "second"]))


def _commit_until_done(producer: Producer, errors: list[BaseException]) -> None:
    """commit_transaction, again while librdkafka calls the failure retriable (the coordinator moved)."""
    deadline = time.monotonic() + 90
    while True:
        try:
            producer.commit_transaction(30)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                errors.append(exc)
                return


def test_a_commit_completes_on_the_new_coordinator_when_the_coordinator_is_killed(cluster: Cluster) -> None:
    topic = "txn-failover"
    transactional_id = "failover-txn"
    create_topic(cluster, topic, PARTITIONS)
    wait_for_full_isr(cluster, topic)
    producer = _producer(cluster, transactional_id)
    producer.begin_transaction()
    _send(producer, topic, "before")
    producer.commit_transaction(30)

    state_partition = partition_for(transactional_id, TXN_PARTITIONS)
    wait_for_full_isr(cluster, "__transaction_state")
    coordinator_id = partition_states(cluster, "__transaction_state")[state_partition][0]
    coordinator = cluster.brokers[coordinator_id]

    producer.begin_transaction()
    _send(producer, topic, "during")
    errors: list[BaseException] = []
    committing = threading.Thread(target=_commit_until_done, args=(producer, errors))
    committing.start()
    coordinator.kill()  # while EndTxn is on its way, in flight, or writing markers
    try:
        committing.join(120)
        assert not committing.is_alive() and not errors, errors
        eventually(lambda: partition_states(cluster, "__transaction_state")[state_partition][0]
                   not in (-1, coordinator_id), "a new leader of the transaction's state partition")
        producer.begin_transaction()
        _send(producer, topic, "after")
        producer.commit_transaction(30)
        committed = _values(cluster, topic, "read_committed", 3 * PARTITIONS * PER_PARTITION)
    finally:
        coordinator.start()
    assert sorted(committed) == sorted(_expected(["before", "during", "after"]))
