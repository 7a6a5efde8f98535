"""SASL_PLAINTEXT against the real broker: PLAIN from the JAAS config, SCRAM users created through the
CLI and AlterUserScramCredentials and used at once, by confluent-kafka, kafka-python, aiokafka,
kcat and our client; and the hostile cases (wrong passwords, requests before authentication,
oversized tokens, a client that stops after its handshake)."""

from __future__ import annotations

import asyncio
import base64
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.client import Connection
from pybroker.client.errors import ResponseError
from pybroker.client.sasl import SaslCredentials
from pybroker.client.scram_admin import ScramUpsertion, alter_user_scram_credentials
from pybroker.client.cluster import KafkaClient
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pybroker.client.errors import KafkaConnectionError, KafkaTimeoutError
from pybroker.client.sasl import authenticate
from pybroker.client.wire import ClientWire
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.test_hostile_clients import closed_by_broker
from tests.eventually import eventually_async

ADMIN = ("admin", "admin-secret")
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-plain";')
DELAY_MS = 300
IDLE_MS = 3000
SASL_OVERRIDES = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "security.inter.broker.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "connection.failed.authentication.delay.ms": str(DELAY_MS),
    "connections.max.idle.ms": str(IDLE_MS),
}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("sasl"), SASL_OVERRIDES).start()
    yield process
    process.kill()


def librdkafka(broker: BrokerProcess, mechanism: str, user: str, password: str, **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password, **extra}


def run(coro):
    return asyncio.run(coro)


def scram_user(broker: BrokerProcess, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> None:
    async def go() -> None:
        async with KafkaClient(broker.bootstrap, sasl=SaslCredentials("PLAIN", *ADMIN)) as client:
            results = await alter_user_scram_credentials(client, [ScramUpsertion(user, mechanism, password, 4096)], [])
            assert results == {user: None}
    run(go())


def round_trip(config: dict[str, str], topic: str) -> list[bytes]:
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer(config)
    for i in range(5):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 30
    while len(values) < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


def test_confluent_kafka_plain(sasl_broker):
    topic = f"plain-{uuid.uuid4().hex[:6]}"
    assert round_trip(librdkafka(sasl_broker, "PLAIN", "alice", "alice-plain"), topic) == \
        [f"m{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_cli_creates_scram_users_used_without_restart(sasl_broker, tmp_path, mechanism):
    user = f"u{uuid.uuid4().hex[:6]}"
    command_config = tmp_path / "admin.properties"
    command_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                              f"sasl.jaas.config={JAAS.split(' user_')[0]};\n")

    def configs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pybroker", "configs", "--bootstrap-server", sasl_broker.bootstrap,
                               "--command-config", str(command_config), "--entity-type", "users", *args],
                              capture_output=True, text=True, timeout=60, cwd=REPO)

    added = configs("--entity-name", user, "--alter", "--add-config", f"{mechanism}=[iterations=8192,password=s3cret]")
    assert added.stdout == f"Completed updating config for user {user}.\n", added.stderr
    described = configs("--entity-name", user, "--describe")
    assert described.stdout == f"SCRAM credential configs for user-principal '{user}' are {mechanism}=iterations=8192\n"
    topic = f"scram-{uuid.uuid4().hex[:6]}"
    assert len(round_trip(librdkafka(sasl_broker, mechanism, user, "s3cret"), topic)) == 5
    with pytest.raises(KafkaException):
        AdminClient(librdkafka(sasl_broker, mechanism, user, "wrong")).list_topics(timeout=3)
    deleted = configs("--entity-name", user, "--alter", "--delete-config", mechanism)
    assert deleted.returncode == 0, deleted.stderr
    with pytest.raises(KafkaException):
        AdminClient(librdkafka(sasl_broker, mechanism, user, "s3cret")).list_topics(timeout=3)
    gone = configs("--entity-name", user, "--describe")
    assert gone.stdout == (f"Error retrieving SCRAM credential configs for user-principal '{user}': "
                           f"ResourceNotFoundException: Attempt to describe a user credential that does not exist: "
                           f"{user}\n")


def test_kafka_python_scram_sha_512(sasl_broker):
    from kafka import KafkaConsumer, KafkaProducer
    scram_user(sasl_broker, "kp-user", "kp-secret", "SCRAM-SHA-512")
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    common = dict(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="kp-user", sasl_plain_password="kp-secret")
    producer = KafkaProducer(**common)
    for i in range(3):
        producer.send(topic, f"k{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common)
    assert [m.value for m in consumer][:3] == [b"k0", b"k1", b"k2"]
    consumer.close()


def test_aiokafka_scram_sha_256_and_plain(sasl_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    scram_user(sasl_broker, "aio-user", "aio-secret")
    topic = f"aio-{uuid.uuid4().hex[:6]}"

    async def go() -> list[bytes]:
        common = dict(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT")
        producer = AIOKafkaProducer(sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="aio-user",
                                    sasl_plain_password="aio-secret", **common)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", sasl_mechanism="PLAIN",
                                    sasl_plain_username="alice", sasl_plain_password="alice-plain", **common)
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=10000)
            return [record.value for records in batch.values() for record in records]
        finally:
            await consumer.stop()

    assert run(go()) == [b"a0", b"a1", b"a2"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_kcat(sasl_broker, mechanism):
    user, password = ("alice", "alice-plain") if mechanism == "PLAIN" else ("kcat-user", "kcat-secret")
    if mechanism != "PLAIN":
        scram_user(sasl_broker, user, password)
    topic = f"kcat-{uuid.uuid4().hex[:6]}"
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanism={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    produced = subprocess.run(["kcat", "-P", "-b", sasl_broker.bootstrap, "-t", topic, *auth], input="x\ny\n",
                              capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-C", "-b", sasl_broker.bootstrap, "-t", topic, "-e", "-q", *auth],
                              capture_output=True, text=True, timeout=60)
    assert consumed.stdout.split() == ["x", "y"], consumed.stderr


# Raw exchanges with our codecs: the broker's exact answers.

async def connect(broker: BrokerProcess) -> Connection:
    host, port = broker.bootstrap.split(":")
    return await Connection.open(host, int(port), timeout=10)


async def closed(connection: Connection, timeout: float) -> bool:
    """Whether the broker closes the connection within `timeout` (a request then fails)."""
    try:
        await connection.send_at(MetadataRequest(topics=[]), 1, MetadataResponse, timeout=timeout)
    except KafkaConnectionError:
        return True
    except KafkaTimeoutError:
        return False
    return False


@pytest.mark.parametrize("mechanism, user, message", [
    ("PLAIN", "alice", "Authentication failed: Invalid username or password"),
    ("PLAIN", "nobody", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "nobody", "Authentication failed during authentication due to invalid credentials with "
                                "SASL mechanism SCRAM-SHA-256"),
])
def test_wrong_password_is_answered_after_the_delay_then_closed(sasl_broker, mechanism, user, message):
    async def go() -> None:
        connection = await connect(sasl_broker)
        started = time.monotonic()
        with pytest.raises(ResponseError) as info:
            await authenticate(connection, SaslCredentials(mechanism, user, "wrong"))
        assert info.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert str(info.value) == message
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
        assert await closed(connection, 5)
        await connection.close()

    run(go())


def test_unsupported_mechanism_lists_the_enabled_ones_and_closes(sasl_broker):
    async def go() -> None:
        connection = await connect(sasl_broker)
        response = await connection.send_at(SaslHandshakeRequest(mechanism="GSSAPI"), 1, SaslHandshakeResponse)
        assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert await closed(connection, 5)
        await connection.close()

    run(go())


def test_requests_before_authentication_are_refused_and_closed(sasl_broker):
    async def go() -> None:
        connection = await connect(sasl_broker)  # ApiVersions is allowed
        response = await connection.send_at(ListGroupsRequest(), 4, ListGroupsResponse)
        assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert await closed(connection, 5)
        await connection.close()
        connection = await connect(sasl_broker)  # a response without a top-level error: closed at once
        with pytest.raises(KafkaConnectionError):
            await connection.send_at(MetadataRequest(topics=[]), 1, MetadataResponse, timeout=5)
        await connection.close()
        connection = await connect(sasl_broker)  # after the handshake, only SaslAuthenticate
        await connection.send_at(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
        response = await connection.send_at(ListGroupsRequest(), 4, ListGroupsResponse)
        assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
        await connection.close()

    run(go())


def test_oversized_token_closes_without_reading_it(sasl_broker):
    async def go() -> None:
        connection = await connect(sasl_broker)
        await connection.send_at(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
        with pytest.raises(KafkaConnectionError):
            await connection.send_at(SaslAuthenticateRequest(auth_bytes=b"\0" * 600_000), 2, SaslAuthenticateResponse,
                                     timeout=10)
        await connection.close()

    run(go())


def test_a_large_frame_before_authentication_is_refused_at_its_size_prefix(tmp_path: Path):
    """Before authenticating, a client may not make the broker buffer more than
    sasl.server.max.receive.size: a frame declaring 50 MB (under socket.request.max.bytes) is
    refused when its size prefix arrives, not after the broker has read it. (A broker of its own:
    the closing log line is rate-limited per reason.)"""
    broker = BrokerProcess(tmp_path, SASL_OVERRIDES).start()
    host, port = broker.bootstrap.split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(struct.pack(">i", 50_000_000) + b"\0" * 64)
            assert broker.wait_for_log(r"frame of 50000000 bytes exceeds the maximum of 524288 bytes")
            assert closed_by_broker(sock, 10)
    finally:
        broker.kill()


def test_client_that_stops_after_the_handshake_is_closed_when_idle(sasl_broker):
    host, port = sasl_broker.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=IDLE_MS / 1000 * 4) as sock:
        _, frame = ClientWire("raw").encode_request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1)
        sock.sendall(frame)
        size = struct.unpack(">i", sock.recv(4))[0]
        sock.recv(size)
        started = time.monotonic()
        assert sock.recv(1) == b""  # closed by the broker, not by our timeout
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.5


def test_v0_handshake_then_bare_tokens(sasl_broker):
    """Clients before KIP-152 send the SASL tokens without SaslAuthenticate headers."""
    host, port = sasl_broker.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        _, frame = ClientWire("raw").encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 0)
        sock.sendall(frame)
        size = struct.unpack(">i", sock.recv(4))[0]
        assert size > 0
        sock.recv(size)
        token = b"\0alice\0alice-plain"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert sock.recv(4) == b"\0\0\0\0"  # an empty answer: authenticated


def test_alter_and_describe_errors_are_kafkas(sasl_broker):
    Upsert = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    Delete = AlterUserScramCredentialsRequest.ScramCredentialDeletion

    async def go() -> None:
        async with KafkaClient(sasl_broker.bootstrap, sasl=SaslCredentials("PLAIN", *ADMIN)) as client:
            connection = await client.connect()
            request = AlterUserScramCredentialsRequest(
                upsertions=[Upsert(name="few", mechanism=1, iterations=1000, salt=b"s", salted_password=b"p"),
                            Upsert(name="many", mechanism=1, iterations=20000, salt=b"s", salted_password=b"p"),
                            Upsert(name="mech", mechanism=9, iterations=4096, salt=b"s", salted_password=b"p"),
                            Upsert(name="twice", mechanism=2, iterations=4096, salt=b"s", salted_password=b"p"),
                            Upsert(name="", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p")],
                deletions=[Delete(name="twice", mechanism=2), Delete(name="absent", mechanism=1)])
            response = await connection.send(request, AlterUserScramCredentialsResponse)
            results = {r.user: (r.error_code, r.error_message) for r in response.results}
            assert results == {
                "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
                "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
                "mech": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
                "twice": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
                "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
                "absent": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
            }
            Name = DescribeUserScramCredentialsRequest.UserName
            described = await connection.send(DescribeUserScramCredentialsRequest(
                users=[Name(name="absent"), Name(name="dup"), Name(name="dup")]), DescribeUserScramCredentialsResponse)
            assert [(r.user, r.error_code) for r in described.results] == [
                ("absent", ErrorCode.RESOURCE_NOT_FOUND), ("dup", ErrorCode.DUPLICATE_RESOURCE)]

    run(go())


def test_reauthentication_and_expired_sessions(tmp_path: Path):
    """Waits for the broker's own clock: the second session is used until the broker closes it as expired;
    the first one, authenticated earlier with the same lifetime, has expired by then too."""
    broker = BrokerProcess(tmp_path, {**SASL_OVERRIDES, "connections.max.reauth.ms": "1500"}).start()
    try:
        async def go() -> None:
            credentials = SaslCredentials("PLAIN", "alice", "alice-plain")
            first = await connect(broker)
            assert await authenticate(first, credentials) == 1500
            await first.send_at(MetadataRequest(topics=[]), 1, MetadataResponse)
            second = await connect(broker)
            await authenticate(second, credentials)

            async def closed_as_expired() -> bool:
                try:
                    await second.send_at(MetadataRequest(topics=[]), 1, MetadataResponse, timeout=5)
                except KafkaConnectionError:  # expired: any request other than SaslHandshake closes it
                    return True
                return False

            await eventually_async(closed_as_expired, "the broker to close the expired session", interval=0.1)
            await second.close()
            assert await authenticate(first, credentials) == 1500  # KIP-368 re-authentication, once expired
            with pytest.raises(ResponseError, match="Cannot change principals"):
                await authenticate(first, SaslCredentials("PLAIN", *ADMIN))
            await first.close()

        run(go())
    finally:
        broker.kill()


def test_start_up_refuses_sasl_settings_that_cannot_work(tmp_path: Path):
    config = tmp_path / "server.properties"
    config.write_text("broker.id=0\n")
    cases = {"sasl.enabled.mechanisms=GSSAPI": "GSSAPI is not supported",
             "listener.name.sasl_plaintext.plain.sasl.jaas.config=": "plain.sasl.jaas.config"}
    for override, expected in cases.items():
        args = [sys.executable, "-m", "pybroker", "serve", str(config), "--override",
                f"log.dirs={tmp_path / 'logs'}"]
        for key, value in {**SASL_OVERRIDES, **dict([override.split("=", 1)])}.items():
            args += ["--override", f"{key}={value}"]
        result = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=REPO)
        assert result.returncode == 1
        assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


async def _server_first(connection: Connection, mechanism: str, user: str) -> dict[str, str]:
    """The fields of the SCRAM server-first message answering a client-first for ``user``."""
    handshake = await connection.send_at(SaslHandshakeRequest(mechanism=mechanism), 1, SaslHandshakeResponse)
    assert handshake.error_code == ErrorCode.NONE
    first = await connection.send_at(SaslAuthenticateRequest(auth_bytes=f"n,,n={user},r=clientnonce".encode()), 2,
                                     SaslAuthenticateResponse)
    assert first.error_code == ErrorCode.NONE, first
    return dict(item.split("=", 1) for item in bytes(first.auth_bytes).decode().split(","))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_answers_an_unknown_user_as_it_answers_one_created_with_the_defaults(sasl_broker, mechanism):
    """One unauthenticated round trip must not tell whether a user exists: the same salt length and
    iteration count as a user created with the defaults, and the same salt each time it is asked."""
    real = f"real-{uuid.uuid4().hex[:6]}"
    scram_user(sasl_broker, real, "real-secret", mechanism)

    async def go() -> list[dict[str, str]]:
        answers = []
        for user in (real, "ghost-user", "ghost-user"):
            connection = await connect(sasl_broker)
            try:
                answers.append(await _server_first(connection, mechanism, user))
            finally:
                await connection.close()
        return answers

    known, ghost, again = run(go())
    assert len(base64.b64decode(ghost["s"])) == len(base64.b64decode(known["s"])) == 32
    assert ghost["i"] == known["i"] == "4096"
    assert ghost["s"] == again["s"] and ghost["s"] != known["s"]


def test_sasl_authenticate_after_login_is_illegal_sasl_state(sasl_broker):
    """Kafka's KafkaApis answers it ILLEGAL_SASL_STATE and keeps the connection; it raised inside the broker."""
    async def go() -> None:
        connection = await connect(sasl_broker)
        try:
            await authenticate(connection, SaslCredentials("PLAIN", "alice", "alice-plain"))
            answer = await connection.send_at(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-plain"), 2,
                                              SaslAuthenticateResponse)
            assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
            assert answer.error_message == "SaslAuthenticate request received after successful authentication"
            metadata = await connection.send_at(MetadataRequest(topics=[]), 1, MetadataResponse)
            assert metadata.brokers
        finally:
            await connection.close()

    run(go())
    assert "Traceback" not in sasl_broker.log_text()
