"""OAUTHBEARER against the real broker: librdkafka's unsecured JWT on a listener with Kafka's unsecured
validator; RS256 tokens signed here, from confluent-kafka's oauth_cb, on a listener validating against
a JWKS file and one validating against a JWKS served over HTTP; expired, wrong-audience and
badly signed tokens refused with Kafka's error challenge then SASL_AUTHENTICATION_FAILED; the session
lifetime is the token's (KIP-368)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import jwt
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.asymmetric import rsa

from pybroker.client.connection import Connection
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pybroker.security.sasl.oauthbearer import ClientResponse, unsecured_token
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_sasl import round_trip
from tests.integration.tls import BOUND

AUDIENCE, ISSUER = "kafka", "https://idp.example"
MESSAGES = [f"m{i}".encode() for i in range(5)]


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks(key: rsa.RSAPrivateKey, kid: str = "k1") -> str:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return json.dumps({"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]})


def signed(key: rsa.RSAPrivateKey, lifetime_s: int = 600, **claims) -> tuple[str, float]:
    now = int(time.time())
    body = {"sub": "alice", "iat": now, "exp": now + lifetime_s, "aud": AUDIENCE, "iss": ISSUER, **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": "k1"}), float(body["exp"])


def ports_of(broker: BrokerProcess) -> dict[str, int]:
    return {m.group(2): int(m.group(1)) for line in broker.log_lines if (m := BOUND.search(line))}


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory, signing_key) -> Iterator[dict[str, int]]:
    """SASL_PLAINTEXT: the unsecured validator; SECURED: JWT against a JWKS file."""
    data_dir = tmp_path_factory.mktemp("oauth")
    jwks_path = data_dir / "jwks.json"
    jwks_path.write_text(jwks(signing_key))
    broker = BrokerProcess(data_dir, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SECURED://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SECURED:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.secured.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": jwks_path.as_uri(),
        "listener.name.secured.oauthbearer.sasl.oauthbearer.expected.audience": AUDIENCE,
        "listener.name.secured.sasl.oauthbearer.expected.issuer": ISSUER,
        "connection.failed.authentication.delay.ms": "100"}).start()
    yield ports_of(broker)
    broker.kill()


def oauth_cb_config(port: int, token_source) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _config: token_source()}


def test_librdkafka_unsecured_jwt(oauth_broker):
    config = {"bootstrap.servers": f"127.0.0.1:{oauth_broker['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
              "sasl.oauthbearer.config": "principal=alice scope=kafka extension_traceId=abc"}
    assert round_trip(config, f"unsecured-{uuid.uuid4().hex[:6]}") == MESSAGES


def test_signed_token_from_oauth_cb(oauth_broker, signing_key):
    config = oauth_cb_config(oauth_broker["SECURED"], lambda: (*signed(signing_key), "alice", {}))
    assert round_trip(config, f"signed-{uuid.uuid4().hex[:6]}") == MESSAGES


def test_unsecured_token_on_the_jwt_listener_is_refused(oauth_broker):
    config = {"bootstrap.servers": f"127.0.0.1:{oauth_broker['SECURED']}", "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
              "sasl.oauthbearer.config": "principal=alice"}
    with pytest.raises(KafkaException):
        AdminClient(config).list_topics(timeout=3)


async def exchange(port: int, token: str) -> tuple[SaslAuthenticateResponse, SaslAuthenticateResponse | None]:
    """The first SaslAuthenticate answer, and for a challenge the answer to the client's ^A."""
    connection = await Connection.open("127.0.0.1", port, timeout=10)
    try:
        handshake = await connection.send_at(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, SaslHandshakeResponse)
        assert handshake.error_code == ErrorCode.NONE
        first = await connection.send_at(SaslAuthenticateRequest(auth_bytes=ClientResponse(token).to_bytes()), 2,
                                         SaslAuthenticateResponse)
        if first.error_code != ErrorCode.NONE or not first.auth_bytes:
            return first, None
        return first, await connection.send_at(SaslAuthenticateRequest(auth_bytes=b"\x01"), 2,
                                               SaslAuthenticateResponse)
    finally:
        await connection.close()


def test_bad_tokens_get_kafkas_challenge_then_fail(oauth_broker, signing_key):
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    bad = {"expired": signed(signing_key, lifetime_s=-120)[0], "audience": signed(signing_key, aud="other")[0],
           "signature": signed(other_key)[0], "issuer": signed(signing_key, iss="https://evil")[0]}
    for reason, token in bad.items():
        first, final = asyncio.run(exchange(oauth_broker["SECURED"], token))
        assert (first.error_code, bytes(first.auth_bytes)) == (ErrorCode.NONE, b'{"status":"invalid_token"}'), reason
        assert final is not None and final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, reason
        assert final.error_message == '{"status":"invalid_token"}', reason
    expired = unsecured_token("alice", -60, time.time() - 120)
    first, final = asyncio.run(exchange(oauth_broker["SASL_PLAINTEXT"], expired))
    assert bytes(first.auth_bytes) == b'{"status":"invalid_token"}'
    assert final is not None and final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_session_lifetime_is_the_tokens(oauth_broker, signing_key):
    token, expires_s = signed(signing_key, lifetime_s=300)
    first, _ = asyncio.run(exchange(oauth_broker["SECURED"], token))
    assert first.error_code == ErrorCode.NONE and bytes(first.auth_bytes) == b""
    assert expires_s * 1000 - time.time() * 1000 - 30_000 < first.session_lifetime_ms <= 300_000
    first, _ = asyncio.run(exchange(oauth_broker["SASL_PLAINTEXT"], unsecured_token("bob", 120, time.time())))
    assert 90_000 < first.session_lifetime_ms <= 120_000


def test_jwks_over_http(tmp_path: Path, signing_key):
    body = jwks(signing_key).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    broker = BrokerProcess(tmp_path, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": f"http://127.0.0.1:{server.server_address[1]}/jwks.json",
        "sasl.oauthbearer.expected.audience": AUDIENCE}).start()
    try:
        port = ports_of(broker)["SASL_PLAINTEXT"]
        config = oauth_cb_config(port, lambda: (*signed(signing_key), "alice", {}))
        assert AdminClient(config).list_topics(timeout=10).brokers
        first, final = asyncio.run(exchange(port, signed(signing_key, aud="other")[0]))
        assert final is not None and final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    finally:
        broker.kill()
        server.shutdown()


def test_start_up_refuses_oauthbearer_settings_that_cannot_work(tmp_path: Path):
    from tests.integration.test_tls import _serve_fails
    common = ("listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name=PLAINTEXT",
              "sasl.enabled.mechanisms=OAUTHBEARER")
    cases = {
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=com.example.Mine":
            "Invalid value com.example.Mine for configuration "
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class",
        f"sasl.oauthbearer.jwks.endpoint.url={(tmp_path / 'missing.json').as_uri()}":
            "for configuration sasl.oauthbearer.jwks.endpoint.url: cannot read the JWKS file",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler":
            "Missing configuration sasl.oauthbearer.jwks.endpoint.url",
    }
    for override, expected in cases.items():
        stderr = _serve_fails(tmp_path, *common, override)
        assert expected in stderr and len(stderr.strip().splitlines()) == 1, stderr
    stderr = _serve_fails(tmp_path, "listeners=SASL_PLAINTEXT://127.0.0.1:0",
                          "security.inter.broker.protocol=SASL_PLAINTEXT", "sasl.enabled.mechanisms=OAUTHBEARER",
                          "sasl.mechanism.inter.broker.protocol=OAUTHBEARER")
    assert "sasl.mechanism.inter.broker.protocol" in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_token_times_outside_int64_milliseconds_are_invalid_tokens(oauth_broker, signing_key):
    """An ``exp`` or ``iat`` that is not a finite number of seconds whose milliseconds fit a long is an
    invalid token (jose4j's NumericDate), not an answer the broker fails to encode."""
    now = time.time()
    for name, value in (("exp", 1e300), ("exp", float("nan")), ("exp", float("inf")), ("exp", -1e300),
                        ("iat", float("nan")), ("iat", -1e300)):
        claims = {name: value}
        unsecured = unsecured_token("alice", 600, now, **claims)
        secured = jwt.encode({"sub": "alice", "iat": int(now), "exp": int(now) + 600, "aud": AUDIENCE, "iss": ISSUER,
                              **claims}, signing_key, algorithm="RS256", headers={"kid": "k1"})
        for listener, token in (("SASL_PLAINTEXT", unsecured), ("SECURED", secured)):
            first, final = asyncio.run(exchange(oauth_broker[listener], token))
            assert (first.error_code, bytes(first.auth_bytes)) == (ErrorCode.NONE, b'{"status":"invalid_token"}'), \
                (listener, name, value)
            assert final is not None and final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
