"""pybroker.testing's embedding API against real clients: crash recovery, bad input, async, a cluster."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from pybroker.testing import AsyncEmbeddedBroker, EmbeddedBroker, EmbeddedBrokerError, EmbeddedCluster
from pybroker.testing import zookeeper


def pid_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def produce_acked(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[object] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors


def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


def test_acknowledged_data_survives_kill_and_restart_on_the_same_address(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_dir=tmp_path, num_partitions=2) as broker:
        address = broker.bootstrap_servers
        broker.create_topic("crash", partitions=2, config={"retention.ms": 3_600_000})
        values = [f"v{i}".encode() for i in range(100)]
        produce_acked(broker.bootstrap_servers, "crash", values)
        first_pid = broker.pid
        assert first_pid is not None
        broker.kill()
        assert not broker.running and pid_gone(first_pid)
        broker.restart()
        assert broker.bootstrap_servers == address and broker.pid != first_pid
        assert sorted(consume_all(broker.bootstrap_servers, "crash", 100)) == sorted(values)
        data_dir = broker.data_dir
        assert data_dir is not None and (data_dir / "logs" / "crash-1").is_dir()
    assert not data_dir.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_taken_port_is_a_clear_error_and_leaves_nothing_behind(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = EmbeddedBroker(port=port, tmp_dir=tmp_path)
        with pytest.raises(EmbeddedBrokerError, match=f"port {port} on 127.0.0.1 is already in use"):
            broker.start()
    assert broker.pid is not None and pid_gone(broker.pid, 1.0)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_temp_dir_is_a_clear_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes through permission bits: sysfs refuses new directories even to root
        read_only = Path("/sys")
    else:
        read_only = tmp_path / "ro"
        read_only.mkdir(mode=0o500)
    with pytest.raises(EmbeddedBrokerError, match=f"cannot create the broker's temporary directory in {read_only}"):
        EmbeddedBroker(tmp_dir=read_only).start()
    with pytest.raises(EmbeddedBrokerError, match="is not writable"):
        EmbeddedBroker(data_dir=read_only / "broker").start()


def test_the_async_variant_serves_aiokafka_without_blocking_its_loop() -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def scenario() -> list[bytes]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        async with AsyncEmbeddedBroker(config={"log.retention.ms": "3600000"}) as broker:
            assert ticks > 5  # the loop ran while the broker started
            await broker.create_topic("async-topic")
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
            await producer.start()
            await producer.send_and_wait("async-topic", b"hello")
            await producer.stop()
            consumer = AIOKafkaConsumer("async-topic", bootstrap_servers=broker.bootstrap_servers,
                                        auto_offset_reset="earliest")
            await consumer.start()
            try:
                batch = await consumer.getmany(timeout_ms=10_000)
            finally:
                await consumer.stop()
        ticking.cancel()
        return [record.value for records in batch.values() for record in records]

    assert asyncio.run(scenario()) == [b"hello"]


def test_a_broker_started_from_a_short_lived_thread_outlives_that_thread() -> None:
    # The kernel's parent-death signal follows the forking thread: the spawner thread, not this one, forks.
    broker = EmbeddedBroker()
    starter = threading.Thread(target=broker.start)
    starter.start()
    starter.join()
    try:
        assert broker.running
        broker.create_topic("after-the-thread")
        produce_acked(broker.bootstrap_servers, "after-the-thread", [b"x"])
    finally:
        broker.close()


def test_a_missing_zookeeper_names_the_debian_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(zookeeper, "JARS", tmp_path)
    with pytest.raises(zookeeper.ZooKeeperUnavailable, match="package `zookeeper`"):
        EmbeddedCluster(brokers=1).start()
