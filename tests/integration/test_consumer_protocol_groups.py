"""The consumer group protocol (KIP-848) with confluent-kafka's ``group.protocol=consumer``: the broker
assigns, members reconcile incrementally, only moved partitions are revoked, commits carry the
member epoch, and nothing is read twice or skipped across joins, leaves and a restart of the group."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pybroker.protocol.api_keys import ApiKey
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic, produce_keyed, report
from tests.integration.test_api_versions_honesty import advertised, closes_without_answer
from tests.integration.test_cli_topics import ok, run
from tests.integration.test_metrics import METRICS_URL, scrape

CLIENT = "confluent/848"
HEARTBEAT_INTERVAL_MS = 500
OVERRIDES = {
    "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
    "group.consumer.session.timeout.ms": "6000",
    "metrics.port": "0",
}


@pytest.fixture(scope="module")
def consumer_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("kip848"), overrides=OVERRIDES).start()
    yield process
    process.kill()


class Member:
    """A consumer-protocol member polled by its own thread; commits each message before the next poll,
    so a partition revoked during a poll has its position committed."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str = "consumer") -> None:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "group.protocol": protocol}
        if protocol == "classic":
            config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                           "partition.assignment.strategy": "cooperative-sticky"})
        self.consumer = Consumer(config)
        self.assignment: set[int] = set()
        self.revoked: list[int] = []
        self.commit_errors: list[KafkaError] = []
        self.stale_commits = 0
        self.consumed: list[tuple[int, int, bytes, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revoked.extend(tp.partition for tp in partitions)

    def _run(self, topic: str) -> None:
        self.consumer.subscribe([topic], on_revoke=self._on_revoke)
        while not self._stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and not msg.error():
                self.consumed.append((msg.partition(), msg.offset(), msg.value(), time.monotonic()))
                self._commit(msg)
            self.assignment = {tp.partition for tp in self.consumer.assignment()}

    def _commit(self, msg: Message) -> None:
        """Commit, again while the epoch the client sent was bumped by a heartbeat crossing it (Kafka 4.0
        answers STALE_MEMBER_EPOCH; the client learns the new epoch from its next heartbeat response)."""
        deadline = time.monotonic() + 10
        while True:
            try:
                self.consumer.commit(message=msg, asynchronous=False)
                return
            except KafkaException as exc:  # also a classic member's commit during a rebalance
                error = exc.args[0]
                if error.code() != KafkaError.STALE_MEMBER_EPOCH or time.monotonic() > deadline:
                    self.commit_errors.append(error)
                    return
                self.stale_commits += 1
                self._stop.wait(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def split(members: list[Member], sizes: list[int]) -> bool:
    assignments = [m.assignment for m in members]
    union = set().union(*assignments)
    return sorted(len(a) for a in assignments) == sizes and sum(map(len, assignments)) == len(union) == sum(sizes)


class Feeder:
    """Produces keyed messages steadily until stopped, to measure pauses in consumption."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 1})
        self.sent: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _run(self, topic: str) -> None:
        i = 0
        while not self._stop.is_set():
            value = f"{topic}-live-{i}".encode()
            self.producer.produce(topic, key=value, value=value)
            self.sent.add(value)
            self.producer.poll(0)
            i += 1
            self._stop.wait(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(30) == 0


def longest_gap(member: Member, start: float, end: float) -> float:
    times = [t for *_, t in member.consumed if start <= t <= end]
    return max((b - a for a, b in zip(times, times[1:])), default=end - start)


def join_pause(bootstrap: str, protocol: str, topic: str) -> tuple[float, float]:
    """Time for 6 members to reach a stable assignment, and the longest pause a running member that
    keeps its partitions sees while a seventh joins."""
    create_topic(bootstrap, topic, partitions=12)
    feeder = Feeder(bootstrap, topic)
    started = time.monotonic()
    members = [Member(bootstrap, topic, topic, protocol) for _ in range(6)]
    try:
        eventually(lambda: split(members, [2] * 6), f"{protocol}: 6 members with 2 partitions each", timeout=60)
        stable = time.monotonic() - started
        eventually(lambda: all(m.consumed for m in members), "every member consuming")
        before = {id(m): set(m.assignment) for m in members}
        joined_at = time.monotonic()
        members.append(Member(bootstrap, topic, topic, protocol))
        eventually(lambda: split(members, [1, 1, 2, 2, 2, 2, 2]), f"{protocol}: the 7th member placed", timeout=60)
        done = time.monotonic()
        kept = [m for m in members[:6] if m.assignment == before[id(m)]]
        assert kept, "some members keep all their partitions"
        return stable, max(longest_gap(m, joined_at, done) for m in kept)
    finally:
        feeder.stop()
        for m in members:
            m.close()


def test_members_split_join_leave_and_resume_exactly_once(consumer_broker: BrokerProcess) -> None:
    bootstrap = consumer_broker.bootstrap
    topic = group = "kip848-split"
    create_topic(bootstrap, topic)
    sent = produce_keyed(bootstrap, topic, 300)
    started = time.monotonic()
    members = [Member(bootstrap, group, topic) for _ in range(3)]
    stopped: list[Member] = []
    try:
        eventually(lambda: split(members, [2, 2, 2]), lambda: f"2/2/2, got {[m.assignment for m in members]}")
        report(CLIENT, "3-member stable assignment", time.monotonic() - started)
        client = AdminClient({"bootstrap.servers": bootstrap})
        described = client.describe_consumer_groups([group])[group].result(timeout=15)
        assert described.type == ConsumerGroupType.CONSUMER and len(described.members) == 3
        listed = client.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=15)
        assert group in {g.group_id for g in listed.valid}
        url = METRICS_URL.search(consumer_broker.log_text()).group(1)  # type: ignore[union-attr]
        metrics = scrape(url)
        assert metrics[("kafka_server_group_coordinator_metrics_consumer_group_count", (("state", "stable"),))] >= 1
        assert metrics[("kafka_server_group_coordinator_metrics_consumer_group_rebalance_total", ())] >= 3

        before = [set(m.assignment) for m in members]
        for m in members:
            m.revoked.clear()  # the revocations of the first convergence
        newcomer = Member(bootstrap, group, topic)
        members.append(newcomer)
        eventually(lambda: split(members, [1, 1, 2, 2]), lambda: f"1/1/2/2, got {[m.assignment for m in members]}")
        moved = sum(len(b - m.assignment) for b, m in zip(before, members))
        assert moved == len(newcomer.assignment) == 1
        for b, m in zip(before, members):
            assert set(m.revoked) == b - m.assignment, "only the moved partition is revoked"

        sent |= set(_produce_more(bootstrap, topic, 300))
        leaving = members.pop(0)
        leaving.close()
        stopped.append(leaving)
        eventually(lambda: split(members, [2, 2, 2]), lambda: f"2/2/2 after a leave, got {[m.assignment for m in members]}")
        eventually(lambda: _values(members + stopped) >= sent, "every message so far consumed")
        for m in members:
            m.close()
        stopped.extend(members)
        members = []
        sent |= set(_produce_more(bootstrap, topic, 200))
        members = [Member(bootstrap, group, topic)]  # the whole group restarted: committed offsets survive
        eventually(lambda: _values(members + stopped) >= sent, "every message consumed after the restart")
        assert [e for m in members + stopped for e in m.commit_errors] == []
        all_values = [v for m in members + stopped for _, _, v, _ in m.consumed]
        assert len(all_values) == len(set(all_values)), "a message was read twice"
        assert set(all_values) == sent, "a message was skipped"
    finally:
        for m in members:
            m.close()


def _produce_more(bootstrap: str, topic: str, count: int) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    values = [f"{topic}-more-{time.monotonic_ns()}-{i}".encode() for i in range(count)]
    for value in values:
        producer.produce(topic, key=value, value=value)
    assert producer.flush(30) == 0
    return values


def _values(members: list[Member]) -> set[bytes]:
    return {v for m in members for _, _, v, _ in m.consumed}


def test_join_pause_classic_against_consumer_protocol(consumer_broker: BrokerProcess) -> None:
    """Figures for the report: a consumer-protocol member that keeps its partitions is not paused."""
    figures = {}
    for protocol in ("consumer", "classic"):
        figures[protocol] = join_pause(consumer_broker.bootstrap, protocol, f"kip848-pause-{protocol}")
        report(CLIENT, f"6-member stable assignment ({protocol})", figures[protocol][0])
        report(CLIENT, f"pause of a kept member at a join ({protocol})", figures[protocol][1])
    assert figures["consumer"][1] < 5.0


def test_assignments_and_epochs_survive_a_coordinator_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broker = BrokerProcess(tmp_path, overrides=OVERRIDES).start()
    members: list[Member] = []
    try:
        topic = group = "kip848-restart"
        create_topic(broker.bootstrap, topic)
        members = [Member(broker.bootstrap, group, topic) for _ in range(3)]
        eventually(lambda: split(members, [2, 2, 2]), "2/2/2")
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        eventually(lambda: str(client.describe_consumer_groups([group])[group].result(timeout=15).state)
                   .endswith("STABLE"), "Stable")
        before = {m.member_id: ({tp.partition for tp in m.assignment.topic_partitions}, m.assignment)
                  for m in client.describe_consumer_groups([group])[group].result(timeout=15).members}
        assignments = [set(m.assignment) for m in members]
        for m in members:
            m.revoked.clear()

        broker.kill()
        broker.start()

        sent = set(_produce_more(broker.bootstrap, topic, 60))
        eventually(lambda: _values(members) >= sent, "the members consuming after the restart")
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        after = client.describe_consumer_groups([group])[group].result(timeout=15)
        assert {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in after.members} == \
            {member_id: partitions for member_id, (partitions, _) in before.items()}
        assert [set(m.assignment) for m in members] == assignments
        assert all(m.revoked == [] for m in members), "nothing revoked: the group went on where it was"
    finally:
        for m in members:
            m.close()
        broker.kill()


def test_consumer_groups_tool_lists_types_and_describes_both_kinds(consumer_broker: BrokerProcess) -> None:
    bootstrap = consumer_broker.bootstrap
    topic = "kip848-cli"
    create_topic(bootstrap, topic)
    members = [Member(bootstrap, "kip848-cli-new", topic), Member(bootstrap, "kip848-cli-old", topic, "classic")]

    def tool(*args: str) -> list[list[str]]:
        return [line.split() for line in ok(run("consumer-groups", "--bootstrap-server", bootstrap, *args))
                if line.strip()]

    try:
        eventually(lambda: all(len(m.assignment) == 6 for m in members), "both groups assigned")

        listed = tool("--list", "--type")
        assert listed[0] == ["GROUP", "TYPE"]
        assert ["kip848-cli-new", "Consumer"] in listed and ["kip848-cli-old", "Classic"] in listed
        assert [row[0] for row in tool("--list", "--type", "consumer")[1:]].count("kip848-cli-old") == 0
        header, *rows = tool("--describe", "--group", "kip848-cli-new", "--members", "--verbose")
        assert header[-4:] == ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        [row] = rows
        assert row[-3] == f"{topic}(0,1,2,3,4,5)" == row[-1] and row[-4] == row[-2]
        header, row = tool("--describe", "--group", "kip848-cli-new", "--state", "--verbose")
        assert header[-2:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] and "Stable" in row
        header, *rows = tool("--describe", "--group", "kip848-cli-old", "--members")
        assert header[:2] == ["GROUP", "CONSUMER-ID"] and len(rows) == 1
        offsets = tool("--describe", "--group", "kip848-cli-new")
        assert offsets[0][:3] == ["GROUP", "TOPIC", "PARTITION"]
    finally:
        for m in members:
            m.close()
    eventually(lambda: tool("--describe", "--group", "kip848-cli-new", "--state")[1][-2:] == ["Empty", "0"],
               "the consumer group empty")
    reset = tool("--reset-offsets", "--group", "kip848-cli-new", "--topic", topic, "--to-earliest", "--execute")
    assert reset[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"] and len(reset) == 7
    assert tool("--delete", "--group", "kip848-cli-new")[0][:2] == ["Deletion", "of"]
    assert "kip848-cli-new" not in [row[0] for row in tool("--list", "--type")]


def test_rebalance_protocols_decide_what_is_served(consumer_broker: BrokerProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    apis = (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE)
    served = advertised(consumer_broker.bootstrap)
    assert [served.get(k) for k in apis] == [(0, 1), (0, 1)]
    classic_only = BrokerProcess(tmp_path, overrides={"group.coordinator.rebalance.protocols": "classic"}).start()
    try:
        assert not set(apis) & set(advertised(classic_only.bootstrap))
        assert closes_without_answer(classic_only.bootstrap, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0)
    finally:
        classic_only.kill()
