"""config/sasl-ssl.properties and config/sasl-ssl-client.properties as a reader of docs/access-control.md
uses them: a broker started from the sample (only the port, log dir and certificate paths changed),
a SCRAM-SHA-512 user created with `pybroker configs` through the sample client file, and kcat,
confluent-kafka, kafka-python and aiokafka connecting with the settings that page shows."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from pybroker.common.config import BrokerConfig
from pybroker.security.dev_certs import DevCerts, make_dev_certs
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.test_sasl import round_trip
from tests.integration.tls import BOUND

SAMPLE = REPO / "config" / "sasl-ssl.properties"
CLIENT_SAMPLE = REPO / "config" / "sasl-ssl-client.properties"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, DevCerts, Path]]:
    """(bootstrap, certificates, the client sample with this run's CA)."""
    work = tmp_path_factory.mktemp("sample")
    certs = make_dev_certs(work / "certs")
    settings = dict(BrokerConfig.load(str(SAMPLE), []).raw)
    assert settings["listeners"] == "SASL_SSL://:9094"
    settings.update({"listeners": "SASL_SSL://127.0.0.1:0", "advertised.listeners": "SASL_SSL://localhost:0",
                     "log.dirs": str(work / "logs"),
                     "ssl.keystore.location": str(certs.broker), "ssl.truststore.location": str(certs.ca)})
    broker = BrokerProcess(work, settings).start()
    port = next(int(m.group(1)) for line in broker.log_lines if (m := BOUND.search(line)))
    client = work / "client.properties"
    client.write_text(CLIENT_SAMPLE.read_text().replace("config/certs/ca.pem", str(certs.ca)))
    bootstrap = f"localhost:{port}"
    created = subprocess.run(
        [sys.executable, "-m", "pybroker", "configs", "--bootstrap-server", bootstrap, "--command-config", str(client),
         "--alter", "--entity-type", "users", "--entity-name", "alice",
         "--add-config", "SCRAM-SHA-512=[iterations=8192,password=alice-secret]"],
        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert created.stdout == "Completed updating config for user alice.\n", created.stderr
    yield bootstrap, certs, client
    broker.kill()


def test_tools_with_the_client_sample(sample):
    bootstrap, _, client = sample
    tool = [sys.executable, "-m", "pybroker", "topics", "--bootstrap-server", bootstrap, "--command-config", str(client)]
    created = subprocess.run([*tool, "--create", "--topic", "orders"], capture_output=True, text=True, timeout=60,
                             cwd=REPO)
    assert created.returncode == 0, created.stderr
    listed = subprocess.run([*tool, "--list"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert "orders" in listed.stdout.split(), listed.stderr


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_as_in_the_readme(sample):
    bootstrap, certs, _ = sample
    topic = f"kcat-{uuid.uuid4().hex[:6]}"
    auth = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice",
            "-X", "sasl.password=alice-secret", "-X", f"ssl.ca.location={certs.ca}"]
    produced = subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, *auth], input="hello\n",
                              capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-e", "-q", *auth],
                              capture_output=True, text=True, timeout=60)
    assert consumed.stdout == "hello\n", consumed.stderr


def test_confluent_kafka_as_in_the_readme(sample):
    bootstrap, certs, _ = sample
    config = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
              "sasl.username": "alice", "sasl.password": "alice-secret", "ssl.ca.location": str(certs.ca)}
    assert round_trip(config, f"ck-{uuid.uuid4().hex[:6]}") == [f"m{i}".encode() for i in range(5)]


def test_kafka_python_as_in_the_readme(sample):
    from kafka import KafkaConsumer, KafkaProducer
    bootstrap, certs, _ = sample
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    common = dict(bootstrap_servers=bootstrap, security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                  sasl_plain_username="alice", sasl_plain_password="alice-secret", ssl_cafile=str(certs.ca))
    producer = KafkaProducer(**common)
    producer.send(topic, b"hello").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common)
    assert next(iter(consumer)).value == b"hello"
    consumer.close()


def test_aiokafka_as_in_the_readme(sample):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    bootstrap, certs, _ = sample
    topic = f"aio-{uuid.uuid4().hex[:6]}"

    async def go() -> bytes:
        common = dict(bootstrap_servers=bootstrap, security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
                      sasl_plain_username="bob", sasl_plain_password="bob-secret",
                      ssl_context=create_ssl_context(cafile=str(certs.ca)))
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"hello")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            return (await asyncio.wait_for(consumer.getone(), 30)).value
        finally:
            await consumer.stop()

    assert asyncio.run(go()) == b"hello"
