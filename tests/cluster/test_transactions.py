"""Transactions across a real three-broker cluster: the coordinator sends WriteTxnMarkers to the
leaders of the partitions it does not lead, and a transaction survives the loss of its coordinator.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from pybroker.coordinator.records import partition_for
from pybroker.protocol.messages import (
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.protocol.error_codes import ErrorCode
from pybroker.records import build_batch
from tests.eventually import eventually
from tests.cluster.conftest import Cluster
from tests.cluster.test_cluster import PartitionState, create_topic, partition_states, wait_for_full_isr
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_transactions_v2 import marker_written, write_marker

RETRIABLE_PRODUCE = (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                     ErrorCode.REQUEST_TIMED_OUT, ErrorCode.CONCURRENT_TRANSACTIONS)

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


def _preferred_leaders(cluster: Cluster, topic: str, partitions: int) -> dict[int, PartitionState] | None:
    """The partitions' states once every one of ``topic`` is led by its first replica with the whole ISR: nothing
    auto.leader.rebalance would move. (A broker just restarted answers Metadata without partitions until the
    controller has told it them.)"""
    states = partition_states(cluster, topic)
    settled = len(states) == partitions and all(leader == replicas[0] and sorted(isr) == sorted(replicas)
                                                for leader, replicas, isr in states.values())
    return states if settled else None


def marker_requests(broker: BrokerProcess) -> dict[int, float]:
    """WriteTxnMarkers requests ``broker`` handled, per version (its /metrics, RequestsPerSec's version tag)."""
    url = re.findall(r"Prometheus metrics on (http://\S+/metrics)", broker.log_text())[-1]
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {int(sample.labels["version"]): sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "kafka_network_requestmetrics_requests_total"
            and sample.labels["request"] == "WriteTxnMarkers"}


def test_a_v2_transaction_over_every_broker_is_added_by_the_leaders_and_ends_with_a_bumped_epoch(
        cluster: Cluster) -> None:
    """Transactions V2 (KIP-890 part 2) as the Java 4.x producer runs them: Produce v12 to the leaders, which add
    their partition through the coordinator (AddPartitionsToTxn v5 between brokers), then EndTxn v5. The coordinator
    sends the other leaders WriteTxnMarkers v2 with TransactionVersion 2 (KIP-1228), whose bumped epoch they check
    as such: a late marker at the open transaction's epoch is refused, the coordinator's next markers are not."""
    topic = "txn-v2-spread"
    create_topic(cluster, topic, PARTITIONS)
    states = wait_for_full_isr(cluster, topic)
    assert len({leader for leader, _, _ in states.values()}) == 3
    wires = {broker_id: WireClient(b.bootstrap) for broker_id, b in enumerate(cluster.brokers)}
    try:
        def coordinator() -> tuple[int] | None:  # a tuple: broker 0 is a coordinator too
            """The coordinator, once it is the preferred replica of its partition and every partition of
            __transaction_state (created by the first FindCoordinator) is led by its preferred replica with the
            whole ISR: the module's previous test restarted the broker it killed, and until auto.leader.rebalance
            (every 2 s) has handed that broker its partitions back, the coordinator could move away between this
            test's requests (NOT_COORDINATOR)."""
            answer = wires[0].request(FindCoordinatorRequest(key_type=1, coordinator_keys=["v2-spread"]), 4,
                                      FindCoordinatorResponse).coordinators[0]
            settled = _preferred_leaders(cluster, "__transaction_state", TXN_PARTITIONS)
            if answer.error_code != 0 or not settled or \
                    answer.node_id != settled[partition_for("v2-spread", TXN_PARTITIONS)][0]:
                return None
            return (answer.node_id,)

        found = eventually(coordinator, "the transaction coordinator, its partitions led by their preferred replicas",
                           timeout=60)
        assert found is not None
        coordinator_id = found[0]
        txn = wires[coordinator_id]

        def init() -> InitProducerIdResponse | None:
            answer = txn.request(InitProducerIdRequest(transactional_id="v2-spread", transaction_timeout_ms=60000,
                                                       producer_id=-1, producer_epoch=-1), 5, InitProducerIdResponse)
            return answer if answer.error_code == 0 else None

        initial = eventually(init, "InitProducerId")
        assert initial is not None

        def produce_everywhere(epoch: int, label: str) -> None:
            for partition, (leader, _, _) in states.items():
                batch = build_batch([(None, f"{label}-{partition}".encode())], producer_id=initial.producer_id,
                                    producer_epoch=epoch, base_sequence=0, is_transactional=True)
                request = ProduceRequest(transactional_id="v2-spread", acks=-1, timeout_ms=10000, topic_data=[
                    ProduceRequest.TopicProduceData(name=topic, partition_data=[
                        ProduceRequest.PartitionProduceData(index=partition, records=batch)])])

                def produced() -> bool:
                    """As a client does, a retriable refusal is sent again (a follower still catching up on a
                    loaded machine answers NOT_ENOUGH_REPLICAS); any other code fails at once."""
                    code = wires[leader].request(request, 12, ProduceResponse).responses[0] \
                        .partition_responses[0].error_code
                    assert code in (0, *RETRIABLE_PRODUCE), (partition, leader, ErrorCode(code).name)
                    return code == 0
                eventually(produced, f"the transactional produce to partition {partition}")

        def end(epoch: int, commit: bool) -> None:
            ended = txn.request(EndTxnRequest(transactional_id="v2-spread", producer_id=initial.producer_id,
                                              producer_epoch=epoch, committed=commit), 5, EndTxnResponse)
            assert (ended.error_code, ended.producer_epoch) == (0, epoch + 1)

        epoch = initial.producer_epoch
        produce_everywhere(epoch, "v2")
        end(epoch, commit=True)
        partition, (leader, _, _) = next((p, s) for p, s in states.items() if s[0] != coordinator_id)
        committed = marker_written(wires[leader], topic, partition, (initial.producer_id, epoch + 1))
        produce_everywhere(epoch + 1, "v2-aborted")
        late = write_marker(wires[leader], topic, partition, (initial.producer_id, epoch + 1),
                            committed.coordinator_epoch, commit=True)
        assert late == ErrorCode.INVALID_PRODUCER_EPOCH
        end(epoch + 1, commit=False)
    finally:
        for wire in wires.values():
            wire.close()
    committed_values = _values(cluster, topic, "read_committed", PARTITIONS)
    assert sorted(committed_values) == [f"v2-{p}" for p in range(PARTITIONS)]
    for broker_id in {leader for leader, _, _ in states.values()} - {coordinator_id}:
        used = marker_requests(cluster.brokers[broker_id])
        assert used.get(2, 0) >= 2 and used.get(1, 0) == 0, (broker_id, used)  # the commit's and the abort's
