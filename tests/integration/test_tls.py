"""TLS listeners (issue 17 items 1-2): real clients over SSL, mTLS, two listeners each advertising its
own endpoint, hostile handshakes, and start-up refusals of bad TLS settings."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from pybroker.client import KafkaClient
from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaClientError
from pybroker.protocol.messages import DescribeClusterRequest, DescribeClusterResponse, FindCoordinatorRequest, \
    FindCoordinatorResponse
from pybroker.security.dev_certs import DevCerts, make_dev_certs
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.test_hostile_clients import closed_by_broker
from tests.integration.tls import client_tls, start_tls_broker

MESSAGES = 20


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    return make_dev_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, certs: DevCerts) -> Iterator[tuple[BrokerProcess, dict[str, int]]]:
    broker, ports = start_tls_broker(tmp_path_factory.mktemp("broker"), certs, **{"request.receive.timeout.ms": "1500"})
    yield broker, ports
    broker.kill()


def test_each_listener_advertises_its_own_endpoint(tls_broker, certs: DevCerts) -> None:
    _, ports = tls_broker

    async def brokers_seen(port: int, tls: ssl.SSLContext | None) -> list[tuple[int, int, int]]:
        async with KafkaClient(f"127.0.0.1:{port}", tls=tls, timeout=10) as client:
            metadata = await client.metadata([])
            connection = await client.connect()
            cluster = await connection.send(DescribeClusterRequest(), DescribeClusterResponse)
            coordinator = await connection.send(FindCoordinatorRequest(key="g", key_type=0,
                                                                       coordinator_keys=["g"]),
                                                FindCoordinatorResponse)
            found = coordinator.coordinators[0].port if coordinator.coordinators else coordinator.port
            return [(b.port, c.port, found) for b, c in zip(metadata.brokers, cluster.brokers)]

    assert asyncio.run(brokers_seen(ports["PLAINTEXT"], None)) == [(ports["PLAINTEXT"],) * 3]
    assert asyncio.run(brokers_seen(ports["SSL"], client_tls(certs))) == [(ports["SSL"],) * 3]


def test_confluent_kafka_over_ssl(tls_broker, certs: DevCerts) -> None:
    _, ports = tls_broker
    common = {"bootstrap.servers": f"localhost:{ports['SSL']}", "security.protocol": "SSL",
              "ssl.ca.location": str(certs.ca)}
    producer = Producer(common)
    for i in range(MESSAGES):
        producer.produce("tls-confluent", f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**common, "group.id": "tls-confluent", "auto.offset.reset": "earliest"})
    consumer.subscribe(["tls-confluent"])
    values, deadline = [], time.monotonic() + 30
    while len(values) < MESSAGES and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [f"m{i}".encode() for i in range(MESSAGES)]


def test_kafka_python_over_ssl(tls_broker, certs: DevCerts) -> None:
    _, ports = tls_broker
    common = {"bootstrap_servers": f"localhost:{ports['SSL']}", "security_protocol": "SSL",
              "ssl_cafile": str(certs.ca)}
    producer = KafkaProducer(**common)
    for i in range(MESSAGES):
        producer.send("tls-kafka-python", f"m{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer("tls-kafka-python", group_id=None, auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, **common)
    values = [message.value for _, message in zip(range(MESSAGES), consumer)]
    consumer.close()
    assert values == [f"m{i}".encode() for i in range(MESSAGES)]


def test_aiokafka_over_ssl(tls_broker, certs: DevCerts) -> None:
    _, ports = tls_broker

    async def run() -> list[bytes]:
        common = {"bootstrap_servers": f"localhost:{ports['SSL']}", "security_protocol": "SSL",
                  "ssl_context": client_tls(certs)}
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(MESSAGES):
                await producer.send_and_wait("tls-aiokafka", f"m{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("tls-aiokafka", auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            values: list[bytes] = []
            while len(values) < MESSAGES:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                values += [m.value for messages in batch.values() for m in messages]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"m{i}".encode() for i in range(MESSAGES)]


def _still_serves(ports: dict[str, int], certs: DevCerts) -> None:
    async def check() -> None:
        for port, tls in ((ports["PLAINTEXT"], None), (ports["SSL"], client_tls(certs, with_certificate=True))):
            async with KafkaClient(f"127.0.0.1:{port}", tls=tls, timeout=10) as client:
                assert (await client.metadata([])).brokers

    asyncio.run(check())


def test_plaintext_on_the_tls_port_and_tls_on_the_plaintext_port_are_closed(tls_broker, certs: DevCerts) -> None:
    _, ports = tls_broker
    api_versions_v0 = bytes.fromhex("0000000e" "00120000" "00000001" "0004" "74657374")
    with socket.create_connection(("127.0.0.1", ports["SSL"])) as sock:
        sock.sendall(api_versions_v0)
        assert closed_by_broker(sock, 10)
    with socket.create_connection(("127.0.0.1", ports["PLAINTEXT"])) as sock:
        with pytest.raises((ssl.SSLError, ConnectionResetError, OSError)):
            client_tls(certs).wrap_socket(sock, server_hostname="localhost").do_handshake()
    _still_serves(ports, certs)


def test_truncated_and_unfinished_handshakes_are_closed(tls_broker, certs: DevCerts) -> None:
    _, ports = tls_broker
    hello = _client_hello(certs)
    with socket.create_connection(("127.0.0.1", ports["SSL"])) as sock:
        sock.sendall(hello[: len(hello) // 2])
        sock.shutdown(socket.SHUT_WR)  # truncated: the rest never comes
        assert closed_by_broker(sock, 10)
    stalled = [socket.create_connection(("127.0.0.1", ports["SSL"])) for _ in range(5)]
    for sock in stalled:
        sock.sendall(hello[:20])  # then silence: the handshake timeout (request.receive.timeout.ms) closes it
    _still_serves(ports, certs)  # while they stall
    try:
        assert all(closed_by_broker(sock, 10) for sock in stalled)
    finally:
        for sock in stalled:
            sock.close()
    _still_serves(ports, certs)


def _client_hello(certs: DevCerts) -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_tls(certs).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def test_mutual_tls_required(tmp_path: Path, certs: DevCerts) -> None:
    broker, ports = start_tls_broker(tmp_path, certs, **{"ssl.client.auth": "required"})
    try:
        async def connect(tls: ssl.SSLContext) -> None:
            connection = await Connection.open("localhost", ports["SSL"], tls=tls, timeout=10)
            await connection.close()

        with pytest.raises(KafkaClientError):
            asyncio.run(connect(client_tls(certs)))  # no client certificate: the handshake is refused
        asyncio.run(connect(client_tls(certs, with_certificate=True)))
        _still_serves(ports, certs)
        assert broker.process is not None and broker.process.poll() is None
    finally:
        broker.kill()


def _serve_fails(tmp_path: Path, *overrides: str) -> str:
    args = [sys.executable, "-m", "pybroker", "serve", "/dev/null", "--override", "broker.id=0",
            "--override", f"log.dirs={tmp_path / 'logs'}"]
    for item in overrides:
        args += ["--override", item]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    return done.stderr


def test_start_up_refuses_bad_tls_and_listener_settings(tmp_path: Path, certs: DevCerts) -> None:
    assert "ssl.keystore.location" in _serve_fails(tmp_path, "listeners=SSL://127.0.0.1:0",
                                                   "inter.broker.listener.name=SSL")
    assert "Invalid value JKS for configuration ssl.keystore.type" in _serve_fails(
        tmp_path, "listeners=SSL://127.0.0.1:0", "inter.broker.listener.name=SSL",
        f"ssl.keystore.location={certs.broker}")
    assert "listener.name.internal.ssl.keystore.location" in _serve_fails(
        tmp_path, "listeners=INTERNAL://127.0.0.1:0", "listener.security.protocol.map=INTERNAL:SSL",
        "inter.broker.listener.name=INTERNAL", "listener.name.internal.ssl.keystore.type=PEM",
        f"listener.name.internal.ssl.keystore.location={tmp_path / 'missing.pem'}")
    assert "No security protocol defined for listener INTERNAL" in _serve_fails(
        tmp_path, "listeners=INTERNAL://127.0.0.1:0")
    assert "inter.broker.listener.name must be a listener name defined in advertised.listeners" in _serve_fails(
        tmp_path, "listeners=SSL://127.0.0.1:0")
