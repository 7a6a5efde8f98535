"""Consumer groups with kafka-python: assignment under each assignor, rebalances, a killed member,
manual and automatic commits, and the group admin APIs of KafkaAdminClient."""

from __future__ import annotations

import threading
import time

import kafka.errors as Errors
import pytest
from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.structs import OffsetAndMetadata

from tests.eventually import eventually
from tests.integration.groups_common import (
    Consumed,
    HEARTBEAT_INTERVAL_MS,
    KILL_SESSION_TIMEOUT_MS,
    MAX_POLL_INTERVAL_MS,
    MEMBERS,
    PARTITIONS,
    SESSION_TIMEOUT_MS,
    ChildMember,
    assert_balanced,
    assert_resumed_exactly,
    create_topic,
    group_broker,  # noqa: F401  (module fixture)
    is_balanced,
    positions_after,
    produce_keyed,
    report,
)

CLIENT = "kafka-python"
ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
             "sticky": StickyPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}


def new_consumer(bootstrap: str, group: str, topic: str | None = None, assignor: str = "range",
                 **overrides) -> KafkaConsumer:
    config = dict(bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=SESSION_TIMEOUT_MS,
                  heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
                  partition_assignment_strategy=[ASSIGNORS[assignor]], enable_auto_commit=False,
                  auto_offset_reset="earliest")
    config.update(overrides)
    consumer = KafkaConsumer(*([topic] if topic else []), **config)
    if topic:  # the topic's metadata before the first join: see Member for the kafka-python 3.0.12 bug it avoids
        assert topic in consumer.topics()
    return consumer


class Member(ConsumerRebalanceListener):
    """A subscribed consumer polled by its own thread; ``assignment`` is what it currently owns.

    The assignment is tracked from the rebalance callbacks, which kafka-python runs on its IO thread.

    The member fetches the metadata once subscribed, before its first poll, because of a kafka-python
    3.0.12 bug: a join whose SyncGroup answer arrives after ``poll(timeout_ms=50)`` gave up waiting is
    never completed when the rejoin came from the leader's own metadata change. The leader's
    assignment makes its metadata snapshot current, so ``need_rejoin()`` turns false, and neither
    ``coordinator.poll`` nor ``join_group_async`` looks at the join still in flight (the Java client
    loops on ``rejoinNeededOrPending()``): the member keeps polling, never applies its assignment,
    never heartbeats again, and the broker expires it. Such a rejoin follows when the leader assigned
    with an empty snapshot, which kafka-python builds only from a metadata answer that arrives after
    ``subscribe``, and which here often waited behind a 500 ms Fetch on the same connection.
    """

    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str = "range", **overrides):
        self.consumer = new_consumer(bootstrap, group, assignor=assignor, **overrides)
        self.topic = topic
        self.assignment: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def on_partitions_revoked(self, revoked) -> None:
        self.assignment = self.assignment - {tp.partition for tp in revoked}

    def on_partitions_assigned(self, assigned) -> None:
        self.assignment = self.assignment | {tp.partition for tp in assigned}

    def _run(self) -> None:
        self.consumer.subscribe([self.topic], listener=self)
        assert self.topic in self.consumer.topics()
        try:
            while not self._stop.is_set():
                self.consumer.poll(timeout_ms=50)
        finally:
            self.consumer.close(autocommit=False)

    def close(self) -> None:
        """Stop polling; the poll thread closes the consumer, the only thread that uses it."""
        self._stop.set()
        self._thread.join(15)


def close_all(members) -> None:
    for member in members:
        member.close()


@pytest.fixture
def admin(group_broker):
    client = KafkaAdminClient(bootstrap_servers=group_broker.bootstrap)
    yield client
    client.close()


def describe(admin: KafkaAdminClient, group: str) -> dict:
    return admin.describe_groups([group])[group]


@pytest.mark.parametrize("assignor", list(ASSIGNORS))
def test_three_members_share_six_partitions(group_broker, admin, assignor):
    topic = group = f"kp-balance-{assignor}"
    create_topic(group_broker.bootstrap, topic)
    started = time.monotonic()
    members = [Member(group_broker.bootstrap, group, topic, assignor) for _ in range(MEMBERS)]
    try:
        # Observed through DescribeGroups, for the reason given in broker_assignments.
        eventually(lambda: (a := broker_assignments(admin, group)) is not None and len(a) == MEMBERS
                   and is_balanced(a),
                   lambda: f"{assignor}: 2 partitions each, group {describe(admin, group)}")
        report(CLIENT, f"3-member rebalance ({assignor})", time.monotonic() - started)
        described = eventually(lambda: (d := describe(admin, group))["group_state"] == "Stable" and d,
                               "Stable")
        assert described["protocol_type"] == "consumer"
        assert described["protocol_data"] == assignor
        assert len(described["members"]) == MEMBERS
    finally:
        close_all(members)


def test_new_member_triggers_rebalance(group_broker, admin):
    # Observed through DescribeGroups, for the reason given in broker_assignments.
    topic = group = "kp-join"
    create_topic(group_broker.bootstrap, topic)
    members = [Member(group_broker.bootstrap, group, topic) for _ in range(2)]
    try:
        eventually(lambda: (a := broker_assignments(admin, group)) is not None and len(a) == 2 and is_balanced(a),
                   "3 partitions each for 2 members")
        members.append(Member(group_broker.bootstrap, group, topic))
        eventually(lambda: (a := broker_assignments(admin, group)) is not None and len(a) == 3 and is_balanced(a),
                   lambda: f"2 partitions each for 3 members, group {describe(admin, group)}")
    finally:
        close_all(members)


def broker_assignments(admin: KafkaAdminClient, group: str) -> list[set[int]] | None:
    """The partitions the broker handed each member, once the group is Stable (None before).

    Rebalance tests read the group from the broker, which is what they test; the members' own view
    depends on the client applying what the broker handed it.
    """
    described = describe(admin, group)
    if described["group_state"] != "Stable":
        return None
    return [{p for a in m["member_assignment"]["assigned_partitions"] for p in a["partitions"]}
            for m in described["members"]]


def member_assignments(admin: KafkaAdminClient, group: str) -> dict[tuple[str, str], set[int]] | None:
    """``broker_assignments`` by (member id, client id)."""
    described = describe(admin, group)
    if described["group_state"] != "Stable":
        return None
    return {(m["member_id"], m["client_id"]): {p for a in m["member_assignment"]["assigned_partitions"]
                                               for p in a["partitions"]}
            for m in described["members"]}


STAYING = "kp-staying-member"
"""The client id of the in-process members, so the group's description tells the child member from them."""


def test_killed_member_is_removed_after_session_timeout(group_broker, admin):
    # Observed through DescribeGroups, for the reason given in broker_assignments.
    topic = group = "kp-kill"
    create_topic(group_broker.bootstrap, topic)
    child = ChildMember(CLIENT, group_broker.bootstrap, topic, group, KILL_SESSION_TIMEOUT_MS)
    members = [Member(group_broker.bootstrap, group, topic, client_id=STAYING) for _ in range(2)]
    try:
        assigned = eventually(lambda: (a := member_assignments(admin, group)) is not None and len(a) == 3
                              and is_balanced(a.values()) and a,
                              f"balanced 3-member group (child says {child.lines[-3:]})")
        [child_id] = [member for member in assigned if member[1] != STAYING]  # the child keeps the default id
        child.kill()
        killed_at = time.monotonic()
        # Gone, and its partitions spread over the two in-process members.
        eventually(lambda: (a := member_assignments(admin, group)) is not None and child_id not in a
                   and len(a) == 2 and is_balanced(a.values()),
                   lambda: f"the killed member's partitions to move, group {describe(admin, group)}",
                   timeout=KILL_SESSION_TIMEOUT_MS / 1000 + 20)
        report(CLIENT, "killed member -> reassigned", time.monotonic() - killed_at)
    finally:
        child.kill()
        close_all(members)


def consumed(messages: list) -> list[Consumed]:
    """The client's messages as (partition, offset, value)."""
    return [(r.partition, r.offset, r.value) for r in messages]


def consume(consumer: KafkaConsumer, count: int, timeout: float = 30.0) -> list:
    received = []
    deadline = time.monotonic() + timeout
    while len(received) < count:
        assert time.monotonic() < deadline, f"only {len(received)} of {count} messages arrived"
        for records in consumer.poll(timeout_ms=200, max_records=count - len(received)).values():
            received += records
    return received


def assert_nothing_more(consumer: KafkaConsumer, seconds: float = 1.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        extra = [r.value for records in consumer.poll(timeout_ms=100).values() for r in records]
        assert extra == [], f"unexpected extra messages {extra}"


def test_commit_close_restart_resumes_exactly(group_broker):
    topic = group = "kp-resume"
    create_topic(group_broker.bootstrap, topic)
    sent = produce_keyed(group_broker.bootstrap, topic, 60)
    first = new_consumer(group_broker.bootstrap, group, topic)
    part = consume(first, 25)
    next_offsets = positions_after(consumed(part))
    first.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in next_offsets.items()})
    for p, o in next_offsets.items():
        assert first.committed(TopicPartition(topic, p)) == o
    first.close(autocommit=False)

    second = new_consumer(group_broker.bootstrap, group, topic)
    try:
        rest = consume(second, len(sent) - len(part))
        assert_nothing_more(second)
    finally:
        second.close(autocommit=False)
    assert_resumed_exactly(consumed(part), consumed(rest), sent, next_offsets)


def test_auto_commit(group_broker):
    topic = group = "kp-autocommit"
    create_topic(group_broker.bootstrap, topic)
    sent = produce_keyed(group_broker.bootstrap, topic, 30)
    consumer = new_consumer(group_broker.bootstrap, group, topic, enable_auto_commit=True,
                            auto_commit_interval_ms=200)
    try:
        received = consume(consumer, len(sent))
        ends: dict[int, int] = {}
        for record in received:
            ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)

        def committed():
            consumer.poll(timeout_ms=50)  # auto-commits happen inside poll
            return all(consumer.committed(TopicPartition(topic, p)) == o for p, o in ends.items())

        eventually(committed, "auto-committed offsets at the end of each partition", timeout=15)
    finally:
        consumer.close(autocommit=False)
    assert {r.value for r in received} == sent


def test_admin_describe_list_delete_offsets(group_broker, admin):
    topic = group = "kp-admin"
    other_topic = "kp-admin-other"
    create_topic(group_broker.bootstrap, topic)
    create_topic(group_broker.bootstrap, other_topic, partitions=1)
    committer = new_consumer(group_broker.bootstrap, group)
    committer.commit({TopicPartition(topic, p): OffsetAndMetadata(0, "", -1) for p in range(PARTITIONS)}
                     | {TopicPartition(other_topic, 0): OffsetAndMetadata(0, "", -1)})
    committer.close(autocommit=False)
    members = [Member(group_broker.bootstrap, group, topic, client_id=f"kp-admin-client-{i}") for i in range(2)]
    try:
        eventually(lambda: is_balanced(m.assignment for m in members), "3 partitions each")
        described = eventually(lambda: (d := describe(admin, group))["group_state"] == "Stable" and d, "Stable")
        assert described["error"] is None
        assert sorted(m["client_id"] for m in described["members"]) == ["kp-admin-client-0", "kp-admin-client-1"]
        assert all(m["client_host"] == "/127.0.0.1" for m in described["members"])
        assigned = [{p for t in m["member_assignment"]["assigned_partitions"] if t["topic"] == topic
                     for p in t["partitions"]} for m in described["members"]]
        assert_balanced(assigned)
        assert sorted(map(sorted, assigned)) == sorted(sorted(m.assignment) for m in members)
        for m in described["members"]:
            assert m["member_metadata"]["topics"] == [topic]

        listed = {g["group_id"]: g["group_state"] for g in admin.list_groups(states_filter=["Stable"])}
        assert listed.get(group) == "Stable"
        assert group not in {g["group_id"] for g in admin.list_groups(states_filter=["Empty"])}

        assert dict(admin.delete_groups([group]))[group] == Errors.NonEmptyGroupError.__name__

        deleted = admin.delete_group_offsets(group, [TopicPartition(topic, 0), TopicPartition(other_topic, 0)])
        assert deleted == {TopicPartition(topic, 0): Errors.GroupSubscribedToTopicError,
                           TopicPartition(other_topic, 0): Errors.NoError}
    finally:
        close_all(members)
    offsets = admin.list_group_offsets({group: None})[group]
    assert TopicPartition(other_topic, 0) not in offsets
    assert {tp.partition for tp in offsets if tp.topic == topic} == set(range(PARTITIONS))

    eventually(lambda: group in {g["group_id"] for g in admin.list_groups(states_filter=["Empty"])}, "Empty")
    deleted = admin.delete_group_offsets(group, [TopicPartition(topic, 0)])
    assert deleted == {TopicPartition(topic, 0): Errors.NoError}
    assert TopicPartition(topic, 0) not in admin.list_group_offsets({group: None})[group]

    assert dict(admin.delete_groups([group]))[group] == "OK"
    assert group not in {g["group_id"] for g in admin.list_groups()}
    assert admin.list_group_offsets({group: None})[group] == {}
    with pytest.raises(Errors.GroupIdNotFoundError):
        admin.delete_group_offsets(group, [TopicPartition(topic, 1)])
