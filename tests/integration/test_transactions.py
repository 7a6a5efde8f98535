"""Transactions with confluent-kafka against the real broker: exactly-once consume-transform-produce,
aborted data hidden from read_committed only, zombie fencing, and a SIGKILL mid-transaction."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from pybroker.protocol.error_codes import ErrorCode
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_confluent_kafka import create_topic

INPUT_MESSAGES = 100_000
PARTITIONS = 3
ABORT_EVERY = 4  # every 4th transaction of the loop is aborted and redone


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("txn"), {
        "group.initial.rebalance.delay.ms": "0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    }).start()
    yield process
    process.kill()


def read_values(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS) -> list[bytes]:
    """Every value of ``topic`` visible at ``isolation``, reading each partition up to the high watermark it had
    when the read began. A read_committed consumer's end is the last stable offset, which a transaction whose
    EndTxn was answered may still hold back until its marker is written (as in Kafka): its partition is read
    until that end reaches the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": isolation})
    high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_eof: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_eof) < partitions:
            assert time.monotonic() < deadline, f"timed out after {len(values)} messages"
            for msg in consumer.consume(10_000, 0.2):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    if msg.offset() >= high[msg.partition()]:
                        at_eof.add(msg.partition())
                else:
                    at_eof.discard(msg.partition())
                    values.append(msg.value())
    finally:
        consumer.close()
    return values


def fill_input(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                         "enable.idempotence": True})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def test_consume_transform_produce_is_exactly_once_with_aborts(txn_broker: BrokerProcess):
    bootstrap = txn_broker.bootstrap
    create_topic(bootstrap, "ctp-in", PARTITIONS)
    create_topic(bootstrap, "ctp-out", PARTITIONS)
    fill_input(bootstrap, "ctp-in", INPUT_MESSAGES)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-txn", "linger.ms": 20,
                         "batch.num.messages": 10_000})
    producer.init_transactions(30)
    consumer.subscribe(["ctp-in"])
    aborted_written = 0
    transactions = 0
    idle_polls = 0
    try:
        while idle_polls < 3:
            batch = [m for m in consumer.consume(5_000, 2) if not m.error()]
            if not batch:
                idle_polls += 1
                continue
            idle_polls = 0
            transactions += 1
            producer.begin_transaction()
            for msg in batch:
                producer.produce("ctp-out", value=b"out-" + msg.value(), partition=msg.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            if transactions % ABORT_EVERY == 0:
                assert producer.flush(30) == 0  # the aborted batches reach the log before the abort
                aborted_written += len(batch)
                producer.abort_transaction(30)
                for tp in consumer.committed(consumer.assignment(), 30):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            else:
                producer.commit_transaction(30)
    finally:
        consumer.close()
    assert aborted_written > 0

    committed = read_values(bootstrap, "ctp-out", "read_committed")
    assert len(committed) == INPUT_MESSAGES
    assert set(committed) == {b"out-%d" % i for i in range(INPUT_MESSAGES)}
    uncommitted = read_values(bootstrap, "ctp-out", "read_uncommitted")
    assert len(uncommitted) == INPUT_MESSAGES + aborted_written


def test_second_producer_with_same_transactional_id_fences_the_first(txn_broker: BrokerProcess):
    bootstrap = txn_broker.bootstrap
    create_topic(bootstrap, "fence-out", 1)
    config = {"bootstrap.servers": bootstrap, "transactional.id": "fence-txn"}
    zombie = Producer(config)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("fence-out", value=b"zombie")
    assert zombie.flush(30) == 0

    successor = Producer(config)
    successor.init_transactions(30)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    successor.begin_transaction()
    successor.produce("fence-out", value=b"successor")
    successor.commit_transaction(30)

    assert read_values(bootstrap, "fence-out", "read_committed", 1) == [b"successor"]
    assert read_values(bootstrap, "fence-out", "read_uncommitted", 1) == [b"zombie", b"successor"]


def wait_for_stable_end(bootstrap: str, topic: str, timeout_s: float) -> None:
    """Until read_committed reaches the log end: no open transaction holds the LSO back."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "enable.partition.eof": True,
                         "isolation.level": "read_committed"})

    def stable() -> bool:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        while True:
            msg = consumer.poll(10)
            if msg is not None and msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                return msg.offset() >= high

    try:
        eventually(stable, f"{topic} to become stable", timeout=timeout_s, interval=0.5)
    finally:
        consumer.close()


def test_open_transaction_is_aborted_after_sigkill_and_timeout(tmp_path: Path):
    broker = BrokerProcess(tmp_path, {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}).start()
    try:
        create_topic(broker.bootstrap, "crash-out", 1)
        config = {"bootstrap.servers": broker.bootstrap, "transactional.id": f"crash-{uuid.uuid4()}",
                  "transaction.timeout.ms": 4000}
        producer = Producer(config)
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("crash-out", value=b"committed")
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce("crash-out", value=b"open")
        assert producer.flush(30) == 0

        broker.kill()
        broker.start()
        assert broker.wait_for_log(r"Loaded 1 transactional id\(s\)", 30), broker.log_text()[-3000:]
        wait_for_stable_end(broker.bootstrap, "crash-out", 30)
        assert read_values(broker.bootstrap, "crash-out", "read_committed", 1) == [b"committed"]
        assert read_values(broker.bootstrap, "crash-out", "read_uncommitted", 1) == [b"committed", b"open"]
    finally:
        broker.kill()


def test_kafka_python_and_aiokafka_transactional_producers(txn_broker: BrokerProcess):
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    bootstrap = txn_broker.bootstrap
    create_topic(bootstrap, "py-out", 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kafka-python-txn")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("py-out", b"kp-aborted")
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("py-out", b"kp-committed")
    producer.commit_transaction()
    producer.close()

    async def aiokafka_transactions() -> None:
        aio = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aiokafka-txn")
        await aio.start()
        try:
            async with aio.transaction():
                await aio.send_and_wait("py-out", b"aio-committed")
            await aio.begin_transaction()
            await aio.send_and_wait("py-out", b"aio-aborted")
            await aio.abort_transaction()
        finally:
            await aio.stop()

    asyncio.run(aiokafka_transactions())
    assert read_values(bootstrap, "py-out", "read_committed", 1) == [b"kp-committed", b"aio-committed"]
    assert read_values(bootstrap, "py-out", "read_uncommitted", 1) == [
        b"kp-aborted", b"kp-committed", b"aio-committed", b"aio-aborted"]


def test_transaction_admin_apis_and_markers_from_another_coordinator(txn_broker: BrokerProcess):
    """kafka-python's admin describes the open transaction, then a WriteTxnMarkers request (what a
    coordinator on another broker sends) aborts it."""
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    from pybroker.client import Connection
    from pybroker.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

    bootstrap = txn_broker.bootstrap
    create_topic(bootstrap, "admin-out", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "admin-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("admin-out", value=b"open")
    assert producer.flush(30) == 0

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_transactions(["admin-txn"])["admin-txn"]
        assert described.state == "Ongoing"
        listed = admin.list_transactions(state_filters=["Ongoing"])
        assert "admin-txn" in {t.transactional_id for listings in listed.values() for t in listings}
        [state] = admin.describe_producers([KpTopicPartition("admin-out", 0)])[
            KpTopicPartition("admin-out", 0)].active_producers
        assert state.producer_id == described.producer_id and state.current_transaction_start_offset == 0
    finally:
        admin.close()
    for isolation, end in (("read_committed", 0), ("read_uncommitted", 1)):  # ListOffsets: LSO vs high watermark
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        try:
            assert consumer.end_offsets([KpTopicPartition("admin-out", 0)]) == {KpTopicPartition("admin-out", 0): end}
        finally:
            consumer.close()

    async def write_abort_marker() -> WriteTxnMarkersResponse:
        host, port = bootstrap.split(":")
        connection = await Connection.open(host, int(port))
        try:
            return await connection.send(WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=described.producer_id, producer_epoch=described.producer_epoch, transaction_result=False,
                coordinator_epoch=0, topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                    name="admin-out", partition_indexes=[0])])]), WriteTxnMarkersResponse)
        finally:
            await connection.close()

    response = asyncio.run(write_abort_marker())
    assert response.markers[0].topics[0].partitions[0].error_code == 0
    assert read_values(bootstrap, "admin-out", "read_committed", 1) == []
    assert read_values(bootstrap, "admin-out", "read_uncommitted", 1) == [b"open"]


def test_a_marker_for_a_partition_the_broker_does_not_know_is_not_reported_written(txn_broker: BrokerProcess):
    """Chaos round 2001: a broker just restarted, before its metadata arrived, got a WriteTxnMarkers for
    a partition it did not host yet and answered NONE (it took the topic for deleted); the coordinator
    counted the marker written and the transaction stayed open on that partition for good (its
    committed records never readable, read_committed consumers stuck at the LSO). Kafka's replica
    manager answers UNKNOWN_TOPIC_OR_PARTITION and the coordinator retries; only the coordinator
    drops markers of topics deleted in its own metadata."""
    from pybroker.client import Connection
    from pybroker.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

    async def write_marker() -> WriteTxnMarkersResponse:
        host, port = txn_broker.bootstrap.split(":")
        connection = await Connection.open(host, int(port))
        try:
            return await connection.send(WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=4242, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
                topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                    name="not-hosted-here", partition_indexes=[0])])]), WriteTxnMarkersResponse)
        finally:
            await connection.close()

    response = asyncio.run(write_marker())
    assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_markers_for_a_topic_deleted_mid_transaction_are_dropped_by_the_coordinator(txn_broker: BrokerProcess):
    """The other half of the rule above: the coordinator itself drops markers of a topic its metadata
    no longer has, so a transaction whose topic was deleted completes and the next one can start."""
    from confluent_kafka.admin import AdminClient

    bootstrap = txn_broker.bootstrap
    create_topic(bootstrap, "doomed", 1)
    create_topic(bootstrap, "kept", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "doomed-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("doomed", value=b"gone")
    producer.produce("kept", value=b"first")
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(30)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("kept", value=b"second")
    producer.commit_transaction(30)
    assert read_values(bootstrap, "kept", "read_committed", 1) == [b"first", b"second"]
