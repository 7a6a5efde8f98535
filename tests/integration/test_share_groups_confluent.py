"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.16, preview): implicit acceptance,
explicit release and redelivery, several consumers on one partition never given the same record twice, a lock
timeout handing a silent member's records to another, read_committed over transactions, and a group starting by
duration."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import MetadataRequest, MetadataResponse
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_wire import _acknowledge, _fetch, _join

DEADLINE_S = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # A lock-duration floor of 1 s: one test waits for a lock to expire.
    process = BrokerProcess(tmp_path_factory.mktemp("share-confluent"),
                            {"group.share.min.record.lock.duration.ms": "1000"}).start()
    yield process
    process.kill()


def _topic_and_group(bootstrap: str, topic: str, group: str, **configs: str) -> None:
    """A one-partition topic and a share group reading it from the earliest offset (Kafka's default is latest)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in {"share.auto.offset.reset": "earliest", **configs}.items()])
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value.encode())
        producer.flush(10)  # one batch per record: fetches acquire whole batches
    assert producer.flush(10) == 0


def _consumer(bootstrap: str, group: str, explicit: bool) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    return consumer


def _poll_some(consumer: ShareConsumer) -> list:
    def polled() -> list:
        return [m for m in consumer.poll(0.5) if m.error() is None]

    return eventually(polled, "a record")


def test_implicitly_accepted_records_are_not_delivered_again(broker: BrokerProcess) -> None:
    _topic_and_group(broker.bootstrap, "cf-implicit", "cf-implicit-group")
    _produce(broker.bootstrap, "cf-implicit", [f"old{i}" for i in range(10)])
    with _consumer(broker.bootstrap, "cf-implicit-group", explicit=False) as consumer:
        consumer.subscribe(["cf-implicit"])
        seen: list[str] = []
        while len(seen) < 10:
            seen += [m.value().decode() for m in _poll_some(consumer)]
        assert seen == [f"old{i}" for i in range(10)]
        consumer.commit_sync()
    _produce(broker.bootstrap, "cf-implicit", ["new0"])
    with _consumer(broker.bootstrap, "cf-implicit-group", explicit=False) as consumer:
        consumer.subscribe(["cf-implicit"])
        assert [m.value() for m in _poll_some(consumer)] == [b"new0"]


def test_released_records_come_back_with_a_higher_delivery_count(broker: BrokerProcess) -> None:
    _topic_and_group(broker.bootstrap, "cf-release", "cf-release-group")
    _produce(broker.bootstrap, "cf-release", ["a", "b", "c"])
    with _consumer(broker.bootstrap, "cf-release-group", explicit=True) as consumer:
        consumer.subscribe(["cf-release"])
        first: list = []
        while len(first) < 3:
            batch = _poll_some(consumer)
            for message in batch:
                consumer.acknowledge(message, AcknowledgeType.RELEASE)
            consumer.commit_sync()
            first += batch
        again: list = []
        while len(again) < 3:
            batch = _poll_some(consumer)
            for message in batch:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            consumer.commit_sync()
            again += batch
        assert [(m.offset(), m.value()) for m in again] == [(0, b"a"), (1, b"b"), (2, b"c")]
        assert {m.delivery_count() for m in again} == {2}


def test_consumers_sharing_one_partition_get_each_record_once(broker: BrokerProcess) -> None:
    _topic_and_group(broker.bootstrap, "cf-shared", "cf-shared-group")
    values = [f"r{i}" for i in range(30)]
    _produce(broker.bootstrap, "cf-shared", values)
    consumers = [_consumer(broker.bootstrap, "cf-shared-group", explicit=True) for _ in range(3)]
    received: list[str] = []
    try:
        for consumer in consumers:
            consumer.subscribe(["cf-shared"])
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(values) and time.monotonic() < deadline:
            for consumer in consumers:
                for message in consumer.poll(0.2):
                    if message.error() is None:
                        received.append(message.value().decode())
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                consumer.commit_sync()
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(received) == sorted(values)


def test_a_lock_timeout_redelivers_to_another_member(broker: BrokerProcess) -> None:
    """The holder is a bare protocol client that acquires records and then sends nothing (a crashed consumer)."""
    _topic_and_group(broker.bootstrap, "cf-lock", "cf-lock-group", **{"share.record.lock.duration.ms": "1000"})
    _produce(broker.bootstrap, "cf-lock", ["a", "b", "c"])
    holder = WireClient(broker.bootstrap)
    _join(holder, "cf-lock-group", "holder", ["cf-lock"])
    topic_id = holder.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="cf-lock")]), 12,
                              MetadataResponse).topics[0].topic_id
    held = _fetch(holder, "cf-lock-group", "holder", 0, topic_id)
    assert held.acquisition_lock_timeout_ms == 1000
    assert [(a.first_offset, a.last_offset) for a in held.responses[0].partitions[0].acquired_records] == [(0, 2)]
    with _consumer(broker.bootstrap, "cf-lock-group", explicit=True) as other:
        other.subscribe(["cf-lock"])
        taken: list = []
        while len(taken) < 3:
            batch = _poll_some(other)
            for message in batch:
                other.acknowledge(message, AcknowledgeType.ACCEPT)
            other.commit_sync()
            taken += batch
        assert [(m.offset(), m.delivery_count()) for m in taken] == [(0, 2), (1, 2), (2, 2)]
    late = _acknowledge(holder, "cf-lock-group", "holder", 1, topic_id, 0, 2)
    assert late.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    holder.close()


def test_group_configs_out_of_bounds_are_refused_and_described(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(key: str, value: str) -> None:
        resource = ConfigResource(ResourceType.GROUP, "cf-configs", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=20)

    for key, value in (("share.record.lock.duration.ms", "0"), ("share.record.lock.duration.ms", "86400000"),
                       ("share.auto.offset.reset", "sometimes"), ("share.no.such.key", "1")):
        with pytest.raises(KafkaException) as refused:
            alter(key, value)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, (key, value)
    alter("share.record.lock.duration.ms", "20000")
    resource = ConfigResource(ResourceType.GROUP, "cf-configs")
    described = admin.describe_configs([resource])[resource].result(timeout=20)
    assert described["share.record.lock.duration.ms"].value == "20000"
    assert described["share.auto.offset.reset"].value == "latest"


def test_read_committed_skips_aborted_records_and_waits_for_open_transactions(broker: BrokerProcess) -> None:
    """share.isolation.level=read_committed: records of an aborted transaction are never delivered (archived), and
    those of an open one only once it commits (the share-partition reads up to the last stable offset)."""
    topic, group = "cf-committed", "cf-committed-group"
    _topic_and_group(broker.bootstrap, topic, group, **{"share.isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cf-committed-txn"})
    producer.init_transactions(20)
    for values, commit in ((["c0", "c1"], True), (["a0", "a1"], False)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value.encode())
        producer.commit_transaction(20) if commit else producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce(topic, value=b"o0")
    assert producer.flush(20) == 0
    got: list[bytes] = []
    with _consumer(broker.bootstrap, group, explicit=True) as consumer:
        consumer.subscribe([topic])

        def read(count: int) -> bool:
            for message in consumer.poll(0.5):
                if message.error() is None:
                    got.append(message.value())
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            consumer.commit_sync()
            return len(got) >= count

        eventually(lambda: read(2), "the committed records")
        assert got == [b"c0", b"c1"]  # not o0: its transaction is still open
        producer.commit_transaction(20)
        eventually(lambda: read(3), "the record of the transaction committed since")
    assert got == [b"c0", b"c1", b"o0"]


def test_auto_offset_reset_by_duration_skips_records_older_than_the_duration(broker: BrokerProcess) -> None:
    """share.auto.offset.reset=by_duration:PT1H: a new share group starts at the first record whose timestamp is
    within the last hour (Kafka's ListOffsets by timestamp), so two records stamped two hours ago are skipped."""
    _topic_and_group(broker.bootstrap, "cf-duration", "cf-duration-group",
                     **{"share.auto.offset.reset": "by_duration:PT1H"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    two_hours_ago = int(time.time() * 1000) - 2 * 3600 * 1000
    for value, stamp in (("old0", two_hours_ago), ("old1", two_hours_ago + 1), ("new0", 0), ("new1", 0)):
        producer.produce("cf-duration", value=value.encode(), timestamp=stamp)  # 0: the producer's clock
        assert producer.flush(10) == 0
    with _consumer(broker.bootstrap, "cf-duration-group", explicit=False) as consumer:
        consumer.subscribe(["cf-duration"])
        seen: list[tuple[int, bytes]] = []
        while len(seen) < 2:
            seen += [(m.offset(), m.value()) for m in _poll_some(consumer)]
        assert seen == [(2, b"new0"), (3, b"new1")]
