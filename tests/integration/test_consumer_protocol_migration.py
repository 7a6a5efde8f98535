"""Online migration between the group protocols: kafka-python members (classic protocol) replaced one by one by
confluent-kafka members (``group.protocol=consumer``) in one group, without losing committed offsets, reading a
message twice or skipping one; the group becomes a consumer group when the first consumer-protocol member joins
and stays one when the last classic member leaves."""

from __future__ import annotations

import threading
import time

from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.structs import OffsetAndMetadata

from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic
from tests.integration.test_consumer_protocol_groups import (  # noqa: F401  (module fixture)
    Member,
    _produce_more,
    consumer_broker,
    split,
)

TOPIC = GROUP = "kip848-migration"


class ClassicMember(ConsumerRebalanceListener):
    """A kafka-python member that commits each message before polling again."""

    def __init__(self, bootstrap: str, group: str = GROUP, topic: str = TOPIC) -> None:
        self.topic = topic
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=6000,
                                      heartbeat_interval_ms=300, max_poll_interval_ms=20000,
                                      partition_assignment_strategy=[RangePartitionAssignor],
                                      enable_auto_commit=False, auto_offset_reset="earliest")
        self.assignment: set[int] = set()
        self.consumed: list[tuple[int, int, bytes, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def on_partitions_revoked(self, revoked) -> None:  # type: ignore[no-untyped-def]
        self.assignment = self.assignment - {tp.partition for tp in revoked}

    def on_partitions_assigned(self, assigned) -> None:  # type: ignore[no-untyped-def]
        self.assignment = self.assignment | {tp.partition for tp in assigned}

    def _run(self) -> None:
        assert self.consumer.partitions_for_topic(self.topic)
        self.consumer.subscribe([self.topic], listener=self)
        try:
            while not self._stop.is_set():
                for records in self.consumer.poll(timeout_ms=50).values():
                    for record in records:
                        self.consumed.append((record.partition, record.offset, record.value, time.monotonic()))
                        self.consumer.commit({TopicPartition(self.topic, record.partition):
                                              OffsetAndMetadata(record.offset + 1, None, -1)})
        finally:
            self.consumer.close(autocommit=False)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)


def group_type(bootstrap: str, group: str = GROUP) -> ConsumerGroupType:
    client = AdminClient({"bootstrap.servers": bootstrap})
    return client.describe_consumer_groups([group])[group].result(timeout=15).type


def test_classic_members_replaced_one_by_one_by_consumer_protocol_members(consumer_broker: BrokerProcess) -> None:
    bootstrap = consumer_broker.bootstrap
    create_topic(bootstrap, TOPIC)
    sent = set(_produce_more(bootstrap, TOPIC, 200))
    classic = [ClassicMember(bootstrap)]
    # One at a time: kafka-python 3.0.12 now and then stalls when two members form a group together
    # (see tests/integration/test_groups_kafka_python.py).
    eventually(lambda: classic[0].assignment == set(range(6)), "the first classic member holding everything")
    classic.append(ClassicMember(bootstrap))
    modern: list[Member] = []
    stopped: list[Member | ClassicMember] = []

    def everyone() -> list:  # type: ignore[type-arg]
        return [*classic, *modern]

    def consumed_values() -> list[bytes]:
        return [v for m in [*everyone(), *stopped] for _, _, v, _ in m.consumed]

    try:
        eventually(lambda: split(classic, [3, 3]), lambda: f"3/3 classic, got {[m.assignment for m in classic]}")
        assert group_type(bootstrap) == ConsumerGroupType.CLASSIC
        for step in range(2):
            modern.append(Member(bootstrap, GROUP, TOPIC))
            eventually(lambda: split(everyone(), [2, 2, 2]),
                       lambda: f"2/2/2 with a consumer-protocol member, got {[m.assignment for m in everyone()]}",
                       timeout=60)
            assert group_type(bootstrap) == ConsumerGroupType.CONSUMER
            sent |= set(_produce_more(bootstrap, TOPIC, 100))
            leaving = classic.pop(0)
            leaving.close()
            stopped.append(leaving)
            eventually(lambda: split(everyone(), [3, 3]),
                       lambda: f"3/3 after a classic member left, got {[m.assignment for m in everyone()]}",
                       timeout=60)
        assert classic == [] and group_type(bootstrap) == ConsumerGroupType.CONSUMER
        sent |= set(_produce_more(bootstrap, TOPIC, 100))
        eventually(lambda: set(consumed_values()) >= sent, "every message consumed", timeout=60)
        values = consumed_values()
        assert len(values) == len(set(values)), "a message was read twice"
        assert set(values) == sent
    finally:
        for m in everyone():
            m.close()


def test_the_last_consumer_protocol_member_leaving_turns_the_group_classic_again(
        consumer_broker: BrokerProcess) -> None:
    bootstrap = consumer_broker.bootstrap
    name = "kip848-downgrade"
    create_topic(bootstrap, name)
    classic = ClassicMember(bootstrap, name, name)
    modern = Member(bootstrap, name, name)
    try:
        eventually(lambda: split([classic, modern], [3, 3]), lambda: f"3/3, got {[classic.assignment, modern.assignment]}",
                   timeout=60)
        assert group_type(bootstrap, name) == ConsumerGroupType.CONSUMER
        modern.close()
        eventually(lambda: classic.assignment == set(range(6)), "the classic member holding everything", timeout=60)
        eventually(lambda: group_type(bootstrap, name) == ConsumerGroupType.CLASSIC, "a classic group again")
    finally:
        classic.close()
