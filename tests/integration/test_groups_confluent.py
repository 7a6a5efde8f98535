"""Consumer groups with confluent-kafka (librdkafka): assignment, rebalances, failures, commits,
static membership, persistence across a broker crash, and the group admin APIs."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request

import pytest
from confluent_kafka import ConsumerGroupState, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import (
    Consumed,
    GROUP_OVERRIDES,
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

CLIENT = "confluent"


def consumer_config(bootstrap: str, group: str, **overrides) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", **overrides}


class Member:
    """A subscribed consumer polled by its own thread; ``assignment`` is what it currently owns."""

    def __init__(self, bootstrap: str, group: str, topic: str, **overrides):
        self.consumer = Consumer(consumer_config(bootstrap, group, **overrides))
        self.assignment: set[int] = set()
        self.assign_calls = 0
        self.values: list[bytes] = []
        self._stop = threading.Event()
        self._commit: list[TopicPartition] | None = None
        self._committed = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _on_assign(self, _consumer, _partitions) -> None:
        self.assign_calls += 1

    def _run(self, topic: str) -> None:
        self.consumer.subscribe([topic], on_assign=self._on_assign)
        while not self._stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and not msg.error():
                self.values.append(msg.value())
            self.assignment = {tp.partition for tp in self.consumer.assignment()}
            if self._commit is not None:
                self.consumer.commit(offsets=self._commit, asynchronous=False)
                self._commit = None
                self._committed.set()

    def commit(self, offsets: list[TopicPartition]) -> None:
        """A synchronous commit made by the polling thread (librdkafka calls must not race it)."""
        self._committed.clear()
        self._commit = offsets
        assert self._committed.wait(15), "commit did not complete"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def describe(bootstrap: str, group: str):
    client = admin(bootstrap)  # must outlive the future
    return client.describe_consumer_groups([group])[group].result(timeout=15)


def delete_group(bootstrap: str, group: str) -> None:
    client = admin(bootstrap)
    client.delete_consumer_groups([group])[group].result(timeout=15)


def listed_groups(bootstrap: str, states: set[ConsumerGroupState] | None = None) -> dict[str, ConsumerGroupState]:
    client = admin(bootstrap)
    result = client.list_consumer_groups(states=states or set()).result(timeout=15)
    assert result.errors == []
    return {g.group_id: g.state for g in result.valid}


def close_all(members) -> None:
    for member in members:
        member.close()


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_three_members_share_six_partitions(group_broker, assignor):
    topic = group = f"cf-balance-{assignor}"
    create_topic(group_broker.bootstrap, topic)
    started = time.monotonic()
    members = [Member(group_broker.bootstrap, group, topic, **{"partition.assignment.strategy": assignor})
               for _ in range(MEMBERS)]
    try:
        eventually(lambda: is_balanced(m.assignment for m in members), f"{assignor}: 2 partitions each")
        report(CLIENT, f"3-member rebalance ({assignor})", time.monotonic() - started)
        assert_balanced(m.assignment for m in members)
        described = describe(group_broker.bootstrap, group)
        assert described.state == ConsumerGroupState.STABLE
        assert described.partition_assignor == assignor
        assert len(described.members) == MEMBERS
    finally:
        close_all(members)


def test_new_member_triggers_rebalance(group_broker):
    topic = group = "cf-join"
    create_topic(group_broker.bootstrap, topic)
    members = [Member(group_broker.bootstrap, group, topic) for _ in range(2)]
    try:
        eventually(lambda: is_balanced(m.assignment for m in members), "3 partitions each for 2 members")
        before = [set(m.assignment) for m in members]
        calls = [m.assign_calls for m in members]
        members.append(Member(group_broker.bootstrap, group, topic))
        eventually(lambda: is_balanced(m.assignment for m in members), "2 partitions each for 3 members")
        assert all(m.assign_calls > c for m, c in zip(members, calls)), "old members must rebalance"
        assert [m.assignment for m in members[:2]] != before
        assert len(describe(group_broker.bootstrap, group).members) == 3
    finally:
        close_all(members)


def test_killed_member_is_removed_after_session_timeout(group_broker):
    topic = group = "cf-kill"
    create_topic(group_broker.bootstrap, topic)
    child = ChildMember(CLIENT, group_broker.bootstrap, topic, group, KILL_SESSION_TIMEOUT_MS)
    members = [Member(group_broker.bootstrap, group, topic) for _ in range(2)]
    try:
        eventually(lambda: is_balanced([child.assignment] + [m.assignment for m in members]),
                   f"balanced 3-member group (child says {child.lines[-3:]})")
        orphaned = set(child.assignment)
        child.kill()
        killed_at = time.monotonic()
        eventually(lambda: is_balanced(m.assignment for m in members), "the killed member's partitions to move",
                   timeout=KILL_SESSION_TIMEOUT_MS / 1000 + 20)
        report(CLIENT, "killed member -> reassigned", time.monotonic() - killed_at)
        assert orphaned <= set().union(*(m.assignment for m in members))
        assert len(describe(group_broker.bootstrap, group).members) == 2
    finally:
        child.kill()
        close_all(members)


def consumed(messages: list) -> list[Consumed]:
    """The client's messages as (partition, offset, value)."""
    return [(m.partition(), m.offset(), m.value()) for m in messages]


def consume(consumer: Consumer, count: int, timeout: float = 30.0) -> list:
    """Exactly ``count`` messages (fails on errors or when they do not arrive in time)."""
    received = []
    deadline = time.monotonic() + timeout
    while len(received) < count:
        assert time.monotonic() < deadline, f"only {len(received)} of {count} messages arrived"
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert not msg.error(), msg.error()
        received.append(msg)
    return received


def assert_nothing_more(consumer: Consumer, seconds: float = 1.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        assert msg is None or msg.error(), f"unexpected extra message {msg.value()!r}"


def test_commit_close_restart_resumes_exactly(group_broker):
    topic = group = "cf-resume"
    create_topic(group_broker.bootstrap, topic)
    sent = produce_keyed(group_broker.bootstrap, topic, 60)
    first = Consumer(consumer_config(group_broker.bootstrap, group))
    first.subscribe([topic])
    part = consume(first, 25)
    next_offsets = positions_after(consumed(part))
    first.commit(offsets=[TopicPartition(topic, p, o) for p, o in next_offsets.items()], asynchronous=False)
    committed = first.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == next_offsets
    first.close()

    second = Consumer(consumer_config(group_broker.bootstrap, group))
    second.subscribe([topic])
    try:
        rest = consume(second, len(sent) - len(part))
        assert_nothing_more(second)
    finally:
        second.close()
    assert_resumed_exactly(consumed(part), consumed(rest), sent, next_offsets)


def test_auto_commit(group_broker):
    topic = group = "cf-autocommit"
    create_topic(group_broker.bootstrap, topic)
    sent = produce_keyed(group_broker.bootstrap, topic, 30)
    consumer = Consumer(consumer_config(group_broker.bootstrap, group, **{"enable.auto.commit": True,
                                                                          "auto.commit.interval.ms": 200}))
    consumer.subscribe([topic])
    try:
        received = consume(consumer, len(sent))
        ends = {}
        for msg in received:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

        def committed():
            consumer.poll(0.05)
            found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
            return {tp.partition: tp.offset for tp in found if tp.offset >= 0} == ends

        eventually(committed, "auto-committed offsets at the end of each partition", timeout=15)
    finally:
        consumer.close()
    assert {m.value() for m in received} == sent


class RequestCounts:
    """The requests a librdkafka client sent, by name, from its statistics (``brokers[*].req``)."""

    def __init__(self) -> None:
        self._latest: dict = {}
        self.config = {"statistics.interval.ms": 100, "stats_cb": self._record}

    def _record(self, raw: str) -> None:
        self._latest = json.loads(raw)

    def sent(self, request: str) -> int:
        return sum(broker.get("req", {}).get(request, 0) for broker in self._latest.get("brokers", {}).values())


def test_static_member_restart_keeps_assignment(group_broker):
    topic = group = "cf-static"
    create_topic(group_broker.bootstrap, topic)
    static = {"group.instance.id": "static-a", "client.id": "static-a"}
    a = Member(group_broker.bootstrap, group, topic, **static)
    b_requests = RequestCounts()
    b = Member(group_broker.bootstrap, group, topic, **{"group.instance.id": "static-b", "client.id": "static-b",
                                                       **b_requests.config})
    members = [a, b]
    try:
        eventually(lambda: is_balanced(m.assignment for m in members), "3 partitions each")
        eventually(lambda: describe(group_broker.bootstrap, group).state == ConsumerGroupState.STABLE, "Stable")
        before = describe(group_broker.bootstrap, group)
        ids_before = {m.group_instance_id: m.member_id for m in before.members}
        owned_by_a = set(a.assignment)
        b_calls = b.assign_calls
        a.close()  # a static member sends no LeaveGroup: the broker keeps its slot for session.timeout.ms
        a = Member(group_broker.bootstrap, group, topic, **static)
        members = [a, b]
        eventually(lambda: a.assignment == owned_by_a, "the restarted static member to get its partitions back",
                   timeout=SESSION_TIMEOUT_MS / 1000)
        # A rebalance would reach b in a heartbeat's answer and make it revoke and re-assign: five more.
        beats = b_requests.sent("Heartbeat")
        eventually(lambda: b_requests.sent("Heartbeat") >= beats + 5, "five heartbeats of the other member")
        assert b.assign_calls == b_calls, "the other member was rebalanced"
        after = describe(group_broker.bootstrap, group)
        ids_after = {m.group_instance_id: m.member_id for m in after.members}
        assert after.state == ConsumerGroupState.STABLE
        assert ids_after["static-b"] == ids_before["static-b"]
        assert ids_after["static-a"] != ids_before["static-a"], "the restarted member gets a new member id"
        assert {m.group_instance_id: {tp.partition for tp in m.assignment.topic_partitions} for m in after.members} \
            == {m.group_instance_id: {tp.partition for tp in m.assignment.topic_partitions} for m in before.members}
    finally:
        close_all(members)


def test_admin_describe_list_delete(group_broker):
    topic = group = "cf-admin"
    create_topic(group_broker.bootstrap, topic)
    produce_keyed(group_broker.bootstrap, topic, 12)
    members = [Member(group_broker.bootstrap, group, topic, **{"client.id": f"cf-admin-client-{i}"})
               for i in range(2)]
    try:
        eventually(lambda: is_balanced(m.assignment for m in members), "3 partitions each")
        eventually(lambda: describe(group_broker.bootstrap, group).state == ConsumerGroupState.STABLE, "Stable")
        described = describe(group_broker.bootstrap, group)
        assert described.is_simple_consumer_group is False
        assert sorted(m.client_id for m in described.members) == ["cf-admin-client-0", "cf-admin-client-1"]
        assert all(m.host == "/127.0.0.1" for m in described.members)
        assigned = [{tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic}
                    for m in described.members]
        assert_balanced(assigned)
        assert sorted(map(sorted, assigned)) == sorted(sorted(m.assignment) for m in members)

        assert listed_groups(group_broker.bootstrap, {ConsumerGroupState.STABLE}).get(group) \
            == ConsumerGroupState.STABLE
        assert group not in listed_groups(group_broker.bootstrap, {ConsumerGroupState.EMPTY})

        with pytest.raises(KafkaException) as failed:
            delete_group(group_broker.bootstrap, group)
        assert failed.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        members[0].commit([TopicPartition(topic, p, 1) for p in members[0].assignment])
    finally:
        close_all(members)
    eventually(lambda: listed_groups(group_broker.bootstrap, {ConsumerGroupState.EMPTY}).get(group)
               == ConsumerGroupState.EMPTY, "the group to be listed as Empty")
    assert group not in listed_groups(group_broker.bootstrap, {ConsumerGroupState.STABLE})
    delete_group(group_broker.bootstrap, group)
    assert group not in listed_groups(group_broker.bootstrap)
    # DescribeGroups below v6 (librdkafka's) answers an unknown group with state Dead and no members.
    gone = describe(group_broker.bootstrap, group)
    assert gone.state == ConsumerGroupState.DEAD and gone.members == []
    checker = Consumer(consumer_config(group_broker.bootstrap, group))
    try:
        found = checker.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert all(tp.offset < 0 for tp in found), "deleting the group deletes its offsets"
    finally:
        checker.close()


def heartbeats_answered(broker: BrokerProcess) -> float:
    """Heartbeat requests the broker process answered since it (re)started, from its /metrics endpoint."""
    url = re.findall(r"Prometheus metrics on (http://\S+/metrics)", broker.log_text())[-1]
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(float(count) for count in re.findall(
        r'^kafka_network_requestmetrics_requests_total\{request="Heartbeat",version="\d+"\} (\S+)$', text, re.M))


def test_groups_and_offsets_survive_broker_crash(tmp_path):
    broker = BrokerProcess(tmp_path, overrides={**GROUP_OVERRIDES, "metrics.port": "0"}).start()
    try:
        topic = group = "cf-crash"
        live_group = "cf-crash-live"
        create_topic(broker.bootstrap, topic)
        sent = produce_keyed(broker.bootstrap, topic, 40)
        first = Consumer(consumer_config(broker.bootstrap, group))
        first.subscribe([topic])
        part = consume(first, 15)
        next_offsets = positions_after(consumed(part))
        first.commit(offsets=[TopicPartition(topic, p, o) for p, o in next_offsets.items()], asynchronous=False)
        first.close()
        live = Member(broker.bootstrap, live_group, topic, **{"client.id": "survivor", "session.timeout.ms": MAX_POLL_INTERVAL_MS})
        eventually(lambda: len(live.assignment) == PARTITIONS, "the live member's assignment")
        eventually(lambda: describe(broker.bootstrap, live_group).state == ConsumerGroupState.STABLE, "Stable")
        live_member_id = describe(broker.bootstrap, live_group).members[0].member_id

        broker.kill()
        broker.start()

        groups = eventually(lambda: listed_groups(broker.bootstrap), "ListGroups after the restart")
        assert groups.get(group) == ConsumerGroupState.EMPTY
        assert groups.get(live_group) == ConsumerGroupState.STABLE
        described = describe(broker.bootstrap, group)
        assert described.state == ConsumerGroupState.EMPTY and described.members == []
        # The surviving member keeps heartbeating on its generation and stays in the group. Its session
        # outlasts a restart on a loaded machine (else the client itself gives up the member id).
        eventually(lambda: heartbeats_answered(broker) >= 3, "three heartbeats answered by the restarted broker")
        survivor = describe(broker.bootstrap, live_group)
        assert survivor.state == ConsumerGroupState.STABLE
        assert [(m.member_id, m.client_id) for m in survivor.members] == [(live_member_id, "survivor")]
        assert len(live.assignment) == PARTITIONS
        live.close()

        second = Consumer(consumer_config(broker.bootstrap, group))
        committed = second.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == next_offsets
        second.subscribe([topic])
        try:
            rest = consume(second, len(sent) - len(part))
            assert_nothing_more(second)
        finally:
            second.close()
        assert {m.value() for m in part}.isdisjoint(m.value() for m in rest)
        assert {m.value() for m in part} | {m.value() for m in rest} == sent
    finally:
        broker.kill()
