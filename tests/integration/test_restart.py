"""Acknowledged data survives SIGTERM and SIGKILL; indexes answer exactly; a corrupt tail is repaired."""

from __future__ import annotations

import random
import threading
import time
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.broker_process import BrokerProcess
from tests.integration.test_confluent_kafka import consume_all, create_topic


def produce_until_stopped(bootstrap: str, topic: str, stop: threading.Event, acked: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 5000, "retries": 0})

    def on_delivery(err, msg):
        if err is None:
            acked.append(msg.value())

    i = 0
    while not stop.is_set():
        try:
            producer.produce(topic, value=f"m-{i}".encode(), partition=i % 2, on_delivery=on_delivery)
            i += 1
        except BufferError:
            pass
        producer.poll(0.0005 if i % 100 == 0 else 0)
    producer.flush(10)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_acknowledged_messages_survive_shutdown(broker: BrokerProcess, how: str):
    topic = f"restart-{how}"
    create_topic(broker.bootstrap, topic, partitions=2)
    stop = threading.Event()
    acked: list[bytes] = []
    worker = threading.Thread(target=produce_until_stopped, args=(broker.bootstrap, topic, stop, acked))
    worker.start()
    deadline = time.monotonic() + 30
    while len(acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()
    stop.set()
    worker.join(30)
    assert len(acked) > 1000
    broker.start()
    received = consume_all(broker.bootstrap, topic, len(acked), partitions=2)
    values = {r.value for r in received}
    missing = [v for v in acked if v not in values]
    assert missing == [], f"{len(missing)} acknowledged messages lost"
    for partition in (0, 1):
        offsets = sorted(r.offset for r in received if r.partition == partition)
        assert offsets == list(range(len(offsets))), "offsets must continue without gaps"


def test_index_lookups_exact_across_many_small_segments(broker: BrokerProcess):
    topic = "small-segments"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "8000", "index.interval.bytes": "500"})]
                        )[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 20, "linger.ms": 1})
    base_ts = 1_600_000_000_000
    for i in range(5000):
        producer.produce(topic, value=f"v{i:05d}".encode() * 4, partition=0, timestamp=base_ts + i * 10)
    assert producer.flush(30) == 0
    broker.kill()
    broker.start()
    segments = list((broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))
    assert len(segments) > 10, "the topic should have rolled many segments"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    rng = random.Random(7)
    try:
        for offset in rng.sample(range(5000), 40):
            consumer.assign([TopicPartition(topic, 0, offset)])
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            assert msg.offset() == offset and msg.value() == f"v{offset:05d}".encode() * 4
        for index in rng.sample(range(5000), 40):
            target = base_ts + index * 10 - rng.randrange(0, 10)
            found = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
            assert found[0].offset == index
    finally:
        consumer.close()


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_tail_is_repaired_at_startup(broker: BrokerProcess, damage: str):
    topic = f"corrupt-{damage}"
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(100):
        producer.produce(topic, value=f"value-{i}".encode(), partition=0)
        producer.flush(10)
    broker.kill()
    log_file = sorted((broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))[-1]
    data = bytearray(log_file.read_bytes())
    if damage == "flip":
        data[-5] ^= 0xFF
        log_file.write_bytes(bytes(data))
    else:
        log_file.write_bytes(bytes(data[:-7]))
    broker.start()
    assert broker.wait_for_log(rf"{topic}-0.*(truncat|corrupt)|(truncat|corrupt).*{topic}-0"), broker.log_text()
    received = consume_all(broker.bootstrap, topic, 99, partitions=1)
    assert [r.value for r in received] == [f"value-{i}".encode() for i in range(99)]
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, value=b"after", partition=0)
    assert producer.flush(10) == 0
    received = consume_all(broker.bootstrap, topic, 100, partitions=1)
    assert received[-1].offset == 99 and received[-1].value == b"after"


def test_data_and_topics_persist_across_clean_restart(broker: BrokerProcess):
    create_topic(broker.bootstrap, "persisted", partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(300):
        producer.produce("persisted", value=str(i).encode(), partition=i % 3)
    assert producer.flush(10) == 0
    assert broker.stop() == 0
    assert (broker.data_dir / "logs" / ".kafka_cleanshutdown").exists()
    broker.start()
    received = consume_all(broker.bootstrap, "persisted", 300)
    assert sorted(int(r.value) for r in received) == list(range(300))
