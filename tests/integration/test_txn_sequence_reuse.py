"""A transaction librdkafka commits keeps its records when librdkafka reuses the sequence numbers of an
aborted transaction (chaos rounds 7003 and 8013).

A transactional Produce is written but its answer never arrives (a proxy drops it); librdkafka times the
request out and queues the batch for a retry, then the application aborts. The abort purges the batch
and rewinds librdkafka's sequence numbers over it without bumping the producer epoch, so the next
transaction's first batch carries the same epoch and sequence range as the purged one. Answered as a
duplicate of it (what Apache Kafka's transaction version 1 does), that batch was never written and its
commit succeeded without it. pybroker refuses it instead; the application aborts and runs it again.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.broker_process import BrokerProcess

TOPIC = "reused"
PRODUCE = 0
RECORDS = 20


class ResponseDroppingProxy:
    """Forwards Kafka frames to the broker; while ``drop_produce`` is set, Produce answers are dropped."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target_port: int | None = None
        self.drop_produce = threading.Event()
        self.dropped = threading.Event()
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            assert self.target_port is not None
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, upstream]
            produce_ids: set[int] = set()
            threading.Thread(target=self._requests, args=(client, upstream, produce_ids), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, produce_ids), daemon=True).start()

    @staticmethod
    def _frames(sock: socket.socket) -> Iterator[bytes]:
        buffer = b""
        while True:
            while len(buffer) < 4 or len(buffer) < 4 + struct.unpack(">i", buffer[:4])[0]:
                data = sock.recv(65536)
                if not data:
                    return
                buffer += data
            end = 4 + struct.unpack(">i", buffer[:4])[0]
            yield buffer[:end]
            buffer = buffer[end:]

    def _requests(self, source: socket.socket, target: socket.socket, produce_ids: set[int]) -> None:
        with contextlib.suppress(OSError):  # a closed socket ends the pump
            for frame in self._frames(source):
                api_key, _, correlation_id = struct.unpack(">hhi", frame[4:12])
                if api_key == PRODUCE:
                    produce_ids.add(correlation_id)
                target.sendall(frame)

    def _responses(self, source: socket.socket, target: socket.socket, produce_ids: set[int]) -> None:
        with contextlib.suppress(OSError):  # a closed socket ends the pump
            for frame in self._frames(source):
                if struct.unpack(">i", frame[4:8])[0] in produce_ids and self.drop_produce.is_set():
                    self.dropped.set()
                    continue
                target.sendall(frame)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


class TimeoutSeen(logging.Handler):
    """Set once librdkafka reports a Produce request timed out (its batch then waits for a retry)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "REQTMOUT" in record.getMessage() or "timed out" in record.getMessage():
            self.seen.set()


@pytest.fixture
def proxied_broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, ResponseDroppingProxy]]:
    proxy = ResponseDroppingProxy()
    broker = BrokerProcess(tmp_path, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    broker.start()
    proxy.target_port = broker.port
    yield broker, proxy
    proxy.close()
    broker.kill()


def read_committed(bootstrap: str) -> list[str]:
    """Every record a read_committed consumer returns, up to the end of the log (all transactions ended)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[str] = []
        deadline = time.monotonic() + 60
        while consumer.position([TopicPartition(TOPIC, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"read only {len(values)} records up to offset {end}"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
        return values
    finally:
        consumer.close()


def test_a_committed_transaction_keeps_its_records_when_librdkafka_reuses_aborted_sequences(proxied_broker) -> None:
    broker, proxy = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    timeouts = TimeoutSeen()
    logger = logging.getLogger("reused-rdkafka")
    logger.addHandler(timeouts)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "reused", "linger.ms": 5,
                         "socket.timeout.ms": 3000, "retry.backoff.ms": 3000, "retry.backoff.max.ms": 3000,
                         "debug": "protocol,msg", "logger": logger})
    producer.init_transactions(30)

    def transaction(tag: str) -> None:
        producer.begin_transaction()
        for i in range(RECORDS):
            producer.produce(TOPIC, f"{tag}-{i}".encode(), partition=0)

    committed: list[str] = []
    transaction("a")
    producer.commit_transaction(30)
    committed.append("a")

    proxy.drop_produce.set()
    transaction("b")
    producer.poll(0)
    assert proxy.dropped.wait(30), "the proxy never saw b's Produce answer"
    while not timeouts.seen.is_set():  # until librdkafka gave up on the answer: b waits for a retry
        producer.poll(0.1)
    proxy.drop_produce.clear()
    producer.abort_transaction(30)

    for tag in ("c", "d"):
        for attempt in range(3):
            transaction(f"{tag}{attempt}")
            try:
                producer.commit_transaction(30)
            except KafkaException as exc:
                assert exc.args[0].txn_requires_abort(), exc
                producer.abort_transaction(30)
                continue
            committed.append(f"{tag}{attempt}")
            break
    producer.flush(30)

    values = read_committed(broker.bootstrap)
    expected = [f"{tag}-{i}" for tag in committed for i in range(RECORDS)]
    assert values == expected, f"committed transactions {committed}; read {sorted({v.split('-')[0] for v in values})}"
