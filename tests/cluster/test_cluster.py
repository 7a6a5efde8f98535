"""Three real brokers and a real ZooKeeper: placement, replication with acks=all, failover of a leader
and of the controller, a rolling restart with controlled shutdown, and an offline partition.

The tests share one cluster and run in file order; each leaves all three brokers running. Measured
figures (throughput, failover time) are printed: run with -s to see them.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from abc import ABC, abstractmethod
from collections import defaultdict

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pybroker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records import build_batch
from tests.eventually import eventually
from tests.cluster.conftest import Cluster
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

PartitionState = tuple[int, list[int], list[int]]  # leader, replicas, isr


def create_topic(cluster: Cluster, name: str, partitions: int, *, assignment: list[list[int]] | None = None,
                 **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = (NewTopic(name, len(assignment), replica_assignment=assignment, config=configs) if assignment
             else NewTopic(name, partitions, 3, config=configs))
    admin.create_topics([topic])[name].result(30)


def partition_states(cluster: Cluster, topic: str) -> dict[int, PartitionState]:
    """partition -> (leader, replicas, isr), as a client sees it. Asked again while the broker that answers
    knows no partition of the topic: a broker just restarted has none until the controller's UpdateMetadata, and
    a caller's ``[0]`` would raise instead of waiting."""
    def known() -> dict[int, PartitionState]:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        metadata = admin.list_topics(topic, timeout=10).topics[topic]
        return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in metadata.partitions.values()}

    return eventually(known, f"a broker that knows the partitions of {topic}", timeout=60)


def wait_for_full_isr(cluster: Cluster, topic: str, timeout: float = 60) -> dict[int, PartitionState]:
    return eventually(lambda: (s := partition_states(cluster, topic)) and all(
        leader >= 0 and sorted(isr) == sorted(replicas) for leader, replicas, isr in s.values()) and s,
        f"a leader and a full ISR for every partition of {topic}", timeout)


def consume(cluster: Cluster, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: dict[int, list[bytes]] = defaultdict(list)
    deadline = time.monotonic() + 60
    while sum(map(len, values.values())) < expected and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=1.0):
            assert message.error() is None
            values[message.partition()].append(message.value())
    consumer.close()
    return values


class SteadyProducer(ABC):
    """Produces PREFIX-0, PREFIX-1, ... with acks=all and idempotence from a thread until stopped; subclasses
    wrap one client. `acked` keeps each partition's acknowledged values in acknowledgement (= offset) order."""

    prefix = "m"

    def __init__(self, topic: str):
        self.topic = topic
        self.acked: dict[int, list[bytes]] = defaultdict(list)
        self.ack_times: dict[int, float] = {}  # sequence -> when it was acknowledged
        self.failed: list[object] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    @property
    def acked_count(self) -> int:
        return sum(map(len, self.acked.values()))

    def _acknowledged(self, partition: int, value: bytes) -> None:
        self.acked[partition].append(value)
        self.ack_times[int(value.split(b"-")[1])] = time.perf_counter()

    @abstractmethod
    def _send(self, value: bytes, key: bytes) -> None:
        """Hand one message to the client, acknowledgement and failure going to `_acknowledged` / `failed`."""

    @abstractmethod
    def _finish(self) -> None:
        """Wait for the outstanding acknowledgements."""

    def _run(self) -> None:
        while not self._stop.is_set():
            self._send(f"{self.prefix}-{self.sent}".encode(), str(self.sent % 10).encode())
            self.sent += 1
        self._finish()

    def __enter__(self) -> "SteadyProducer":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(90)


class SteadyConfluentProducer(SteadyProducer):
    def __init__(self, cluster: Cluster, topic: str):
        super().__init__(topic)
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 1, "message.timeout.ms": 60000, "retry.backoff.ms": 50,
                                  "topic.metadata.refresh.interval.ms": 500})

    def _on_delivery(self, err, message) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.failed.append(err)
        else:
            self._acknowledged(message.partition(), message.value())

    def _send(self, value: bytes, key: bytes) -> None:
        self.producer.produce(self.topic, value, key=key, on_delivery=self._on_delivery)
        self.producer.poll(0.002)

    def _finish(self) -> None:
        self.producer.flush(60)


class SteadyKafkaPythonProducer(SteadyProducer):
    """kafka-python (idempotent by default) at a gentler pace: it is pure Python and shares the GIL."""

    prefix = "kp"

    def __init__(self, cluster: Cluster, topic: str):
        super().__init__(topic)
        self.producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=1,
                                      retry_backoff_ms=50)

    def _send(self, value: bytes, key: bytes) -> None:
        future = self.producer.send(self.topic, value, key=key)
        future.add_callback(lambda metadata: self._acknowledged(metadata.partition, value))
        future.add_errback(self.failed.append)
        time.sleep(0.005)

    def _finish(self) -> None:
        self.producer.flush(60)
        self.producer.close()


def controller_id(cluster: Cluster) -> int:
    """The broker id in /controller; -1 between a controller's loss and the next election."""
    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        return json.loads(zk.get("/controller")[0])["brokerid"]
    except NoNodeError:  # read, not checked first: the znode may vanish between two calls
        return -1
    finally:
        zk.stop()
        zk.close()


def test_rf3_topic_spreads_leaders_and_zookeeper_holds_kafka_layout(cluster: Cluster) -> None:
    create_topic(cluster, "spread", 3)
    states = wait_for_full_isr(cluster, "spread")
    assert {leader for leader, _, _ in states.values()} == {0, 1, 2}
    assert all(sorted(replicas) == [0, 1, 2] and leader == replicas[0] for leader, replicas, _ in states.values())

    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        assert sorted(zk.get_children("/brokers/ids")) == ["0", "1", "2"]
        registration = json.loads(zk.get("/brokers/ids/1")[0])
        assert registration["port"] == cluster.brokers[1].port and registration["version"] == 5
        assert json.loads(zk.get("/controller")[0])["brokerid"] in (0, 1, 2)
        assert int(zk.get("/controller_epoch")[0]) >= 1
        assert json.loads(zk.get("/cluster/id")[0])["version"] == "1"
        assignment = json.loads(zk.get("/brokers/topics/spread")[0])
        assert assignment["version"] == 3 and sorted(assignment["partitions"]) == ["0", "1", "2"]
        state = json.loads(zk.get("/brokers/topics/spread/partitions/0/state")[0])
        assert state["leader"] == states[0][0] and sorted(state["isr"]) == [0, 1, 2]
        assert json.loads(zk.get("/config/topics/spread")[0]) == {"version": 1, "config": {}}
    finally:
        zk.stop()
        zk.close()


def test_acks_all_throughput_with_replication_factor_3(cluster: Cluster) -> None:
    create_topic(cluster, "throughput", 1, **{"min.insync.replicas": "2"})
    wait_for_full_isr(cluster, "throughput")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    count, errors = 20_000, []
    payload = b"x" * 100
    started = time.perf_counter()
    for _ in range(count):
        producer.produce("throughput", payload, on_delivery=lambda err, _: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.perf_counter() - started
    assert errors == []
    print(f"\nacks=all rf=3: {count} x 100 B in {elapsed:.2f} s = {count / elapsed:,.0f} msg/s")
    assert sum(map(len, consume(cluster, "throughput", 1, count).values())) == count


def test_leader_sigkill_loses_no_acknowledged_message_and_the_old_leader_catches_up(cluster: Cluster) -> None:
    create_topic(cluster, "failover", 1, **{"min.insync.replicas": "2"})
    leader = wait_for_full_isr(cluster, "failover")[0][0]
    producers = (SteadyConfluentProducer(cluster, "failover"), SteadyKafkaPythonProducer(cluster, "failover"))
    with producers[0], producers[1]:
        eventually(lambda: all(p.acked_count >= 200 for p in producers), "200 acknowledged messages from each client")
        cluster.brokers[leader].kill()
        killed_at = time.perf_counter()
        first_new = [p.sent for p in producers]  # later messages can only reach the new leader
        for producer, first in zip(producers, first_new):
            eventually(lambda p=producer, n=first: p.acked_count >= n + 200, "200 messages on the new leader",
                       timeout=60)
    for producer, first in zip(producers, first_new):
        recovered_at = min(t for seq, t in producer.ack_times.items() if seq >= first)
        print(f"\nfailover: leader {leader} killed; first {type(producer).__name__} produce acknowledged by the new "
              f"leader after {recovered_at - killed_at:.2f} s")
        assert producer.failed == []
    new_leader, _, isr = partition_states(cluster, "failover")[0]
    assert new_leader not in (leader, -1) and leader not in isr
    epochs = leader_epochs(cluster.brokers[new_leader], "failover")
    assert len(epochs) >= 2 and epochs[-1][0] == zk_leader_epoch(cluster, "failover")

    # Every acknowledged message once, each client's in the order it was acknowledged.
    stored = consume(cluster, "failover", 1, sum(p.acked_count for p in producers))[0]
    assert len(stored) == sum(p.acked_count for p in producers)
    for producer in producers:
        assert [v for v in stored if v.startswith(f"{producer.prefix}-".encode())] == producer.acked[0]

    # The old leader returns as a follower, drops what was never acknowledged, catches up and rejoins the ISR,
    # which the new leader counts as an ISR expansion in its metrics.
    expands_before = isr_expands(cluster.brokers[new_leader])
    cluster.brokers[leader].start()
    wait_for_full_isr(cluster, "failover")
    assert isr_expands(cluster.brokers[new_leader]) > expands_before
    # It took the new leader's epoch history. auto.leader.rebalance (every 2 s in this fixture) may since have handed
    # leadership back to it, preferred replica, which adds later epochs starting at or past the last one's offset.
    rejoined = leader_epochs(cluster.brokers[leader], "failover")
    assert rejoined[:len(epochs)] == epochs
    later = rejoined[len(epochs):]
    assert all(epoch > epochs[-1][0] and offset >= epochs[-1][1] for epoch, offset in later)
    assert [epoch for epoch, _ in later] == sorted({epoch for epoch, _ in later})


def leader_epochs(broker: BrokerProcess, topic: str) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of partition 0's leader-epoch-checkpoint on `broker`."""
    path = broker.data_dir / "logs" / f"{topic}-0" / LEADER_EPOCH_CHECKPOINT
    return list(LeaderEpochCheckpointFile(str(path)).read().items())


def zk_leader_epoch(cluster: Cluster, topic: str) -> int:
    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        return json.loads(zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])["leader_epoch"]
    finally:
        zk.stop()
        zk.close()


def isr_expands(broker: BrokerProcess) -> float:
    """The broker's kafka_server_replicamanager_isrexpands_total, scraped from its /metrics endpoint."""
    url = re.findall(r"Prometheus metrics on (http://\S+/metrics)", broker.log_text())[-1]
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return float(re.search(r"^kafka_server_replicamanager_isrexpands_total (\S+)$", text, re.M).group(1))


def test_a_new_controller_takes_over_when_the_controller_is_killed(cluster: Cluster) -> None:
    old = controller_id(cluster)
    cluster.brokers[old].kill()
    try:
        new = eventually(lambda: [c for c in [controller_id(cluster)] if c not in (old, -1)], "a new controller")[0]
        # every live broker, not any one: the admin client below sends CreateTopics to the controller the broker
        # it asks first names, and a broker the new controller's UpdateMetadata has not reached names the old one
        eventually(lambda: all(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).controller_id
                               == new for b in cluster.brokers if b.process is not None),
                   "every live broker to name the new controller")
        create_topic(cluster, "after-controller-loss", 2, assignment=[[b for b in range(3) if b != old]] * 2)
        states = eventually(lambda: (s := partition_states(cluster, "after-controller-loss")) and all(
            leader >= 0 for leader, _, _ in s.values()) and s, "leaders for the new topic")
        assert all(leader != old for leader, _, _ in states.values())
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce("after-controller-loss", f"c-{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        assert sum(map(len, consume(cluster, "after-controller-loss", 2, 10).values())) == 10
    finally:
        cluster.brokers[old].start()
    eventually(lambda: len(AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
        timeout=10).brokers) == 3, "the old controller back among the brokers")


def test_rolling_restart_loses_nothing_and_preferred_leaders_return(cluster: Cluster) -> None:
    create_topic(cluster, "rolling", 3, **{"min.insync.replicas": "2"})
    wait_for_full_isr(cluster, "rolling")
    with SteadyConfluentProducer(cluster, "rolling") as producer:
        for broker in cluster.brokers:
            eventually(lambda: producer.acked_count >= producer.sent // 2 + 100, "acknowledgements to keep up")
            assert broker.stop() == 0  # SIGTERM: controlled shutdown first
            assert "Controlled shutdown request returned successfully" in broker.log_text()
            broker.start()
            wait_for_full_isr(cluster, "rolling")
        acked_before_stop = producer.acked_count
        eventually(lambda: producer.acked_count >= acked_before_stop + 200, "200 more acknowledged messages")
    assert producer.failed == []
    assert consume(cluster, "rolling", 3, producer.acked_count) == producer.acked
    # auto.leader.rebalance.enable hands each partition back to its first replica.
    eventually(lambda: all(leader == replicas[0] for leader, replicas, _ in partition_states(
        cluster, "rolling").values()), "the preferred leaders back")


def test_without_unclean_election_a_partition_stays_offline_until_an_isr_member_returns(cluster: Cluster) -> None:
    follower, leader = [b for b in range(3) if b != controller_id(cluster)]
    create_topic(cluster, "offline", 1, assignment=[[leader, follower]])
    wait_for_full_isr(cluster, "offline")
    cluster.brokers[follower].kill()
    eventually(lambda: partition_states(cluster, "offline")[0][2] == [leader], "the ISR to shrink to the leader")
    cluster.brokers[leader].kill()
    eventually(lambda: partition_states(cluster, "offline")[0][0] == -1, "the partition to go offline")
    cluster.brokers[follower].start()
    # The controller has handled the follower's return once clients see it as a live broker.
    eventually(lambda: follower in AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
        timeout=10).brokers, "the follower back among the brokers")
    # A broker answers Metadata before the controller's UpdateMetadata reached it (as Kafka's do),
    # so the just-restarted follower may not know the topic yet: wait for an answer that has it.
    state = eventually(lambda: partition_states(cluster, "offline").get(0), "an answer that knows the topic")
    assert state[0] == -1
    cluster.brokers[leader].start()
    assert wait_for_full_isr(cluster, "offline")[0][0] == leader


def test_a_produce_or_fetch_at_a_follower_names_the_leader_and_its_endpoint(cluster: Cluster) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER comes with the partition's leader and leader epoch (CurrentLeader) and the
    leader's endpoint (NodeEndpoints) in Produce v10+ and Fetch v16+ answers, so the Java client goes there at once."""
    topic = "leader-hints"
    create_topic(cluster, topic, 1, assignment=[[1, 2]])
    leader = wait_for_full_isr(cluster, topic)[0][0]
    follower = 3 - leader  # the other replica of [1, 2]
    wires = {b: WireClient(cluster.brokers[b].bootstrap) for b in (leader, follower)}
    try:
        # A replica leads or follows once its LeaderAndIsr is handled; its metadata, which names the leader in the
        # answers, has the topic once the controller's UpdateMetadata, sent after that, is (as in Kafka): wait until
        # both replicas' answers have the partition and its leader.
        def described_by(broker: int) -> MetadataResponse | None:
            answer = wires[broker].request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
                                           12, MetadataResponse)
            partitions = answer.topics[0].partitions
            return answer if partitions and partitions[0].leader_id == leader else None

        described = eventually(lambda: described_by(follower) and described_by(leader),
                               "both replicas' metadata to name the partition's leader")
        epoch = described.topics[0].partitions[0].leader_epoch
        endpoint = next((b.host, b.port) for b in described.brokers if b.node_id == leader)
        produce = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=build_batch(
                [(None, b"to-a-follower")]))])])
        produced = wires[follower].request(produce, 11, ProduceResponse)
        answer = produced.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (leader, epoch)
        assert [(n.node_id, n.host, n.port) for n in produced.node_endpoints] == [(leader, *endpoint)]
        fetch = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
            topic_id=described.topics[0].topic_id, partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=epoch)])])
        fetched = wires[follower].request(fetch, 16, FetchResponse)
        data = fetched.responses[0].partitions[0]
        assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (data.current_leader.leader_id, data.current_leader.leader_epoch) == (leader, epoch)
        assert [(n.node_id, n.host, n.port) for n in fetched.node_endpoints] == [(leader, *endpoint)]
        older = wires[follower].request(fetch, 15, FetchResponse).responses[0].partitions[0]
        assert (older.error_code, older.current_leader.leader_id) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    finally:
        for wire in wires.values():
            wire.close()
