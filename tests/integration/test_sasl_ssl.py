"""SASL_SSL on one broker: confluent-kafka, kafka-python, aiokafka and kcat log in with PLAIN and
SCRAM-SHA-512 over TLS; a wrong password over TLS is refused as on SASL_PLAINTEXT; and KIP-684:
``ssl.client.auth`` applies to a SASL_SSL listener only with the ``listener.name.<l>.`` prefix."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pybroker.client import KafkaClient
from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaClientError, ResponseError
from pybroker.client.sasl import SaslCredentials, authenticate
from pybroker.client.scram_admin import ScramUpsertion, alter_user_scram_credentials
from pybroker.protocol.error_codes import ErrorCode
from pybroker.security.dev_certs import DevCerts, make_dev_certs
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_sasl import JAAS, round_trip
from tests.integration.tls import BOUND, client_tls, tls_overrides

ADMIN = SaslCredentials("PLAIN", "admin", "admin-secret")
SCRAM_USER = ("scram-user", "scram-secret")
MESSAGES = 5


def sasl_ssl_overrides(certs: DevCerts, **extra: str) -> dict[str, str]:
    return tls_overrides(certs, **{
        "listeners": "SASL_SSL://127.0.0.1:0", "security.inter.broker.protocol": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS, **extra})


def start(data_dir: Path, certs: DevCerts, **extra: str) -> tuple[BrokerProcess, int]:
    data_dir.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(data_dir, sasl_ssl_overrides(certs, **extra)).start()
    port = next(int(m.group(1)) for line in broker.log_lines if (m := BOUND.search(line)) and m.group(2) == "SASL_SSL")
    return broker, port


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    return make_dev_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory: pytest.TempPathFactory, certs: DevCerts) -> Iterator[int]:
    broker, port = start(tmp_path_factory.mktemp("sasl-ssl"), certs)

    async def add_user() -> None:
        async with KafkaClient(f"localhost:{port}", tls=client_tls(certs), sasl=ADMIN) as client:
            upsertion = ScramUpsertion(SCRAM_USER[0], "SCRAM-SHA-512", SCRAM_USER[1], 4096)
            assert await alter_user_scram_credentials(client, [upsertion], []) == {SCRAM_USER[0]: None}

    asyncio.run(add_user())
    yield port
    broker.kill()


def librdkafka(port: int, certs: DevCerts, mechanism: str, user: str, password: str) -> dict[str, str]:
    return {"bootstrap.servers": f"localhost:{port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca), "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def expected(prefix: str) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(MESSAGES)]


@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", "alice-plain"),
                                                       ("SCRAM-SHA-512", *SCRAM_USER)])
def test_confluent_kafka(sasl_ssl_broker, certs, mechanism, user, password):
    topic = f"ck-{uuid.uuid4().hex[:6]}"
    assert round_trip(librdkafka(sasl_ssl_broker, certs, mechanism, user, password), topic) == expected("m")


@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", "alice-plain"),
                                                       ("SCRAM-SHA-512", *SCRAM_USER)])
def test_kafka_python(sasl_ssl_broker, certs, mechanism, user, password):
    from kafka import KafkaConsumer, KafkaProducer
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    common = dict(bootstrap_servers=f"localhost:{sasl_ssl_broker}", security_protocol="SASL_SSL",
                  ssl_cafile=str(certs.ca), sasl_mechanism=mechanism, sasl_plain_username=user,
                  sasl_plain_password=password)
    producer = KafkaProducer(**common)
    for i in range(MESSAGES):
        producer.send(topic, f"k{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common)
    values = [message.value for _, message in zip(range(MESSAGES), consumer)]
    consumer.close()
    assert values == expected("k")


@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", "alice-plain"),
                                                       ("SCRAM-SHA-512", *SCRAM_USER)])
def test_aiokafka(sasl_ssl_broker, certs, mechanism, user, password):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    topic = f"aio-{uuid.uuid4().hex[:6]}"

    async def go() -> list[bytes]:
        common = dict(bootstrap_servers=f"localhost:{sasl_ssl_broker}", security_protocol="SASL_SSL",
                      ssl_context=client_tls(certs), sasl_mechanism=mechanism, sasl_plain_username=user,
                      sasl_plain_password=password)
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(MESSAGES):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < MESSAGES and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=1000)
                values += [record.value for records in batch.values() for record in records]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(go()) == expected("a")


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", "alice-plain"),
                                                       ("SCRAM-SHA-512", *SCRAM_USER)])
def test_kcat(sasl_ssl_broker, certs, mechanism, user, password):
    topic = f"kcat-{uuid.uuid4().hex[:6]}"
    options = [item for key, value in librdkafka(sasl_ssl_broker, certs, mechanism, user, password).items()
               if key != "bootstrap.servers" for item in ("-X", f"{key}={value}")]
    bootstrap = f"localhost:{sasl_ssl_broker}"
    produced = subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, *options], input="x\ny\n",
                              capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-e", "-q", *options],
                              capture_output=True, text=True, timeout=60)
    assert consumed.stdout.split() == ["x", "y"], consumed.stderr


def test_wrong_password_over_tls_is_refused(sasl_ssl_broker, certs):
    with pytest.raises(KafkaException):
        AdminClient(librdkafka(sasl_ssl_broker, certs, "SCRAM-SHA-512", SCRAM_USER[0], "wrong")).list_topics(timeout=3)

    async def go() -> None:
        connection = await Connection.open("localhost", sasl_ssl_broker, tls=client_tls(certs), timeout=10)
        try:
            with pytest.raises(ResponseError) as info:
                await authenticate(connection, SaslCredentials("PLAIN", "alice", "wrong"))
            assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert str(info.value) == "Authentication failed: Invalid username or password"
        finally:
            await connection.close()

    asyncio.run(go())


async def _login(port: int, tls: ssl.SSLContext) -> None:
    async with KafkaClient(f"localhost:{port}", tls=tls, sasl=SaslCredentials("PLAIN", "alice", "alice-plain"),
                           timeout=10) as client:
        assert (await client.metadata([])).brokers


def test_client_auth_applies_to_sasl_ssl_only_with_the_listener_prefix(tmp_path: Path, certs: DevCerts):
    """KIP-684: a broker-wide ssl.client.auth=required leaves SASL_SSL clients without certificates in."""
    broker, port = start(tmp_path / "unprefixed", certs, **{"ssl.client.auth": "required"})
    try:
        asyncio.run(_login(port, client_tls(certs)))
    finally:
        broker.kill()
    broker, port = start(tmp_path / "prefixed", certs, **{"listener.name.sasl_ssl.ssl.client.auth": "required"})
    try:
        with pytest.raises(KafkaClientError):
            asyncio.run(_login(port, client_tls(certs)))  # no certificate: the TLS handshake fails
        asyncio.run(_login(port, client_tls(certs, with_certificate=True)))
        config = librdkafka(port, certs, "PLAIN", "alice", "alice-plain")
        with_certificate = {**config, "ssl.certificate.location": str(certs.client),
                            "ssl.key.location": str(certs.client)}
        assert round_trip(with_certificate, f"mtls-{uuid.uuid4().hex[:6]}") == expected("m")
        with pytest.raises(KafkaException):
            AdminClient(config).list_topics(timeout=3)
    finally:
        broker.kill()
