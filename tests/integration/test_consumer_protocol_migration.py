"""Online migration between the group protocols: kafka-python members (classic protocol) replaced one by one by
confluent-kafka members (``group.protocol=consumer``) in one group, without losing committed offsets, reading a
message twice or skipping one; the group becomes a consumer group when the first consumer-protocol member joins
and stays one when the last classic member leaves."""

from __future__ import annotations

import threading
import time

from confluent_kafka import ConsumerGroupState, ConsumerGroupType, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription
from kafka import KafkaConsumer, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.structs import OffsetAndMetadata

from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic
from tests.integration.test_consumer_protocol_groups import (  # noqa: F401  (module fixture)
    Member,
    _produce_more,
    consumer_broker,
)

TOPIC = GROUP = "kip848-migration"


class ClassicMember:
    """A kafka-python member that commits each message before polling again.

    It fetches the metadata once subscribed, before its first poll, for the kafka-python 3.0.12 bug described at
    tests/integration/test_groups_kafka_python.py's Member (a rejoin whose SyncGroup answer is never applied). It
    fetched it before subscribing, which the coordinator ignores: the leader then assigned with an empty metadata
    snapshot and rejoined at the next metadata answer, the rejoin that bug needs.
    """

    def __init__(self, bootstrap: str, group: str = GROUP, topic: str = TOPIC) -> None:
        self.topic = topic
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=6000,
                                      heartbeat_interval_ms=300, max_poll_interval_ms=20000,
                                      partition_assignment_strategy=[RangePartitionAssignor],
                                      enable_auto_commit=False, auto_offset_reset="earliest")
        self.consumed: list[tuple[int, int, bytes, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.consumer.subscribe([self.topic])
        assert self.topic in self.consumer.topics()
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


COORDINATOR_NOT_READY = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                         KafkaError.NOT_COORDINATOR}
"""Answers a describe gets while the group's coordinator is still being found or loaded: retried, as a client does."""


class Described:
    """The group as the broker describes it (ConsumerGroupDescribe, DescribeGroups while it is classic).

    The assignments are read from the broker, which is what the tests test: kafka-python's own view depends on
    it applying what the broker handed it (see test_groups_kafka_python.broker_assignments); that every message
    is consumed once checks the members did.
    """

    def __init__(self, bootstrap: str, group: str = GROUP) -> None:
        self.client = AdminClient({"bootstrap.servers": bootstrap})
        self.group = group
        self.last: ConsumerGroupDescription | None = None

    def split(self, sizes: list[int], group_type: ConsumerGroupType) -> bool:
        """The group is Stable, of that type, and its members hold partitions in those numbers, none twice."""
        try:
            self.last = self.client.describe_consumer_groups([self.group])[self.group].result(timeout=15)
        except KafkaException as exc:  # COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets is new: not yet
            if exc.args[0].code() in COORDINATOR_NOT_READY:
                return False
            raise
        if self.last.type != group_type or self.last.state != ConsumerGroupState.STABLE:
            return False
        assignments = [{tp.partition for tp in m.assignment.topic_partitions} for m in self.last.members]
        union = set().union(*assignments)
        return sorted(map(len, assignments)) == sizes and sum(map(len, assignments)) == len(union) == sum(sizes)

    def __str__(self) -> str:
        if self.last is None:
            return "nothing described yet"
        return f"{self.last.type} {self.last.state} " + str(
            [sorted(tp.partition for tp in m.assignment.topic_partitions) for m in self.last.members])


def test_classic_members_replaced_one_by_one_by_consumer_protocol_members(consumer_broker: BrokerProcess) -> None:
    bootstrap = consumer_broker.bootstrap
    create_topic(bootstrap, TOPIC)
    sent = set(_produce_more(bootstrap, TOPIC, 200))
    group = Described(bootstrap)
    classic = [ClassicMember(bootstrap)]
    # One at a time: kafka-python 3.0.12 now and then stalls when two members form a group together
    # (see tests/integration/test_groups_kafka_python.py).
    eventually(lambda: group.split([6], ConsumerGroupType.CLASSIC),
               lambda: f"the first classic member holding everything, got {group}")
    classic.append(ClassicMember(bootstrap))
    modern: list[Member] = []
    stopped: list[Member | ClassicMember] = []

    def everyone() -> list:  # type: ignore[type-arg]
        return [*classic, *modern]

    def consumed_values() -> list[bytes]:
        return [v for m in [*everyone(), *stopped] for _, _, v, _ in m.consumed]

    try:
        eventually(lambda: group.split([3, 3], ConsumerGroupType.CLASSIC), lambda: f"3/3 classic, got {group}")
        for step in range(2):
            modern.append(Member(bootstrap, GROUP, TOPIC))
            eventually(lambda: group.split([2, 2, 2], ConsumerGroupType.CONSUMER),
                       lambda: f"2/2/2 in a consumer group with a consumer-protocol member, got {group}", timeout=60)
            sent |= set(_produce_more(bootstrap, TOPIC, 100))
            leaving = classic.pop(0)
            leaving.close()
            stopped.append(leaving)
            eventually(lambda: group.split([3, 3], ConsumerGroupType.CONSUMER),
                       lambda: f"3/3 in a consumer group after a classic member left, got {group}", timeout=60)
        assert classic == []
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
    group = Described(bootstrap, name)
    classic = ClassicMember(bootstrap, name, name)
    modern = Member(bootstrap, name, name)
    try:
        eventually(lambda: group.split([3, 3], ConsumerGroupType.CONSUMER),
                   lambda: f"3/3 in a consumer group, got {group}", timeout=60)
        modern.close()
        eventually(lambda: group.split([6], ConsumerGroupType.CLASSIC),
                   lambda: f"the classic member holding everything in a classic group again, got {group}",
                   timeout=60)
    finally:
        classic.close()
