"""A ZooKeeper-mode broker announces a failed log dir to the controller as Kafka's brokers do: a persistent
sequential znode /log_dir_event_notification/log_dir_event_<seq> holding {"version":1,"broker":<id>,"event":1};
the controller asks the broker (LeaderAndIsr), which answers KAFKA_STORAGE_ERROR for the replicas of that dir, and
moves their leadership to another ISR member: acknowledged records stay readable and producing goes on.
The failing dir is the small tmpfs of test_log_dir_failure (skipped where it cannot be mounted)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from pybroker.client import AdminClient as PyAdminClient
from pybroker.client.cluster import KafkaClient
from pybroker.protocol.error_codes import ErrorCode
from tests.eventually import eventually
from tests.cluster.conftest import CHROOT, broker_overrides
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_log_dir_failure import TOPIC, fill, produce, small_dir  # noqa: F401 (fixture)


def test_the_controller_moves_leadership_off_a_failed_log_dir(tmp_path: Path, small_dir: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    brokers = []
    try:
        for broker_id in range(3):
            data = tmp_path / f"broker-{broker_id}"
            data.mkdir()
            dirs = f"{data / 'disk-a'},{small_dir if broker_id == 0 else data / 'disk-b'}"
            brokers.append(BrokerProcess(data, {**broker_overrides(broker_id, zookeeper.connect + CHROOT),
                                                "log.dirs": dirs}).start())
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # broker 0 leads both partitions; on broker 0 partition 0 lands in disk-a, partition 1 in the tmpfs
        admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=[[0, 1, 2], [0, 1, 2]])])[TOPIC].result(30)
        eventually(lambda: all(p.leader == 0 and len(p.isrs) == 3 for p in
                               admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values()),
                   "broker 0 to lead both partitions with a full ISR")
        delivered = produce_values(bootstrap, [f"before-{i}".encode() for i in range(20)])
        fill(small_dir)
        client = WireClient(brokers[0].bootstrap)
        assert produce(client, 1) == ErrorCode.KAFKA_STORAGE_ERROR  # the tmpfs is full: the dir goes offline
        client.close()
        eventually(lambda: admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[1].leader in (1, 2),
                   "the controller to elect another leader of partition 1")
        partitions = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        assert partitions[0].leader == 0 and 0 not in partitions[1].isrs
        for broker in brokers:  # every broker's Metadata lists broker 0's replica of partition 1 as offline
            eventually(lambda: offline_replicas(broker.bootstrap) == {0: (), 1: (0,)},
                       "the failed dir's replica among the offline replicas")
        delivered += produce_values(bootstrap, [f"after-{i}".encode() for i in range(20)])
        assert sorted(read_all(bootstrap)) == sorted(delivered)
        announced = rf"Announced the failure of log dir {small_dir} to the controller \(/log_dir_event_notification/log_dir_event_\d{{10}}\)"
        assert brokers[0].wait_for_log(announced)
        zk = KazooClient(zookeeper.connect + CHROOT)
        zk.start(timeout=10)
        try:  # the controller took the notification
            eventually(lambda: zk.get_children("/log_dir_event_notification") == [], "the notification to be handled")
        finally:
            zk.stop()
    finally:
        for broker in brokers:
            broker.kill()
            (broker.data_dir / "broker.log").write_text(broker.log_text())
        zookeeper.stop()


def offline_replicas(bootstrap: str) -> dict[int, tuple[int, ...]]:
    async def describe() -> dict[int, tuple[int, ...]]:
        async with KafkaClient(bootstrap) as client:
            topic = (await PyAdminClient(client).describe_topics([TOPIC]))[TOPIC]
            return {p.partition: p.offline_replicas for p in topic.partitions}
    return asyncio.run(describe())


def produce_values(bootstrap: str, values: list[bytes]) -> list[bytes]:
    """Send `values` with acks=all round-robin over both partitions; the ones acknowledged."""
    acknowledged: list[bytes] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000})
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value, partition=i % 2,
                         on_delivery=lambda err, msg: acknowledged.append(msg.value()) if err is None else None)
    producer.flush(30)
    assert len(acknowledged) == len(values)
    return acknowledged


def read_all(bootstrap: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "failing-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in (0, 1)])
    values: list[bytes] = []
    try:
        empty = 0
        while empty < 3:
            batch = consumer.consume(100, timeout=1)
            values += [m.value() for m in batch if m.error() is None]
            empty = 0 if batch else empty + 1
    finally:
        consumer.close()
    return values
