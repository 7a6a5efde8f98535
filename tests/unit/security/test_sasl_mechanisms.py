"""PLAIN, SCRAM and JAAS parsing as pure functions: Kafka's messages and the RFC test vectors."""

from __future__ import annotations

import base64
import hashlib

import pytest

from pybroker.security.sasl import SaslAuthenticationError, SaslCredentialError
from pybroker.security.sasl.jaas import JaasConfigError, jaas_config_for, parse_jaas_config, plain_users
from pybroker.security.sasl.plain import PlainServer, client_token
from pybroker.security.sasl.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramServer,
)

USERS = {"alice": "alice-secret", "admin": "x"}


def test_plain_accepts_a_known_user_and_an_equal_authzid():
    server = PlainServer(USERS.get)
    assert server.evaluate(client_token("alice", "alice-secret", authzid="alice")) == b""
    assert server.complete and server.authorization_id == "alice"


@pytest.mark.parametrize("token, message", [
    (client_token("alice", "wrong"), "Authentication failed: Invalid username or password"),
    (client_token("nobody", "alice-secret"), "Authentication failed: Invalid username or password"),
    (client_token("alice", "alice-secret", authzid="admin"),
     "Authentication failed: Client requested an authorization id that is different from username"),
    (b"alice\x00alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (client_token("", "p"), "Authentication failed: username not specified"),
    (client_token("alice", ""), "Authentication failed: password not specified"),
])
def test_plain_refusals_carry_kafkas_messages(token, message):
    server = PlainServer(USERS.get)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(token)
    assert str(info.value) == message
    assert not server.complete


def test_scram_sha_256_matches_rfc_7677_vector():
    # RFC 7677 section 3: user "user", password "pencil", these nonces, salt and iterations.
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, salt)
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = client.answer(server_first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert credential.salt == salt and credential.iterations == 4096


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_round_trip_and_stored_form(mechanism):
    stored = ScramCredential.from_password(mechanism, "alice-secret", 8192)
    text = stored.to_text()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert ScramCredential.from_text(text) == stored
    server = ScramServer(mechanism, {"alice": stored}.get, b"secret")
    client = ScramClient(mechanism, "alice", "alice-secret")
    client.verify(server.evaluate(client.answer(server.evaluate(client.first()))))
    assert server.complete and server.authorization_id == "alice"


def _failure(mechanism, credentials, user, password):
    server = ScramServer(mechanism, credentials.get, b"secret")
    client = ScramClient(mechanism, user, password)
    server_first = server.evaluate(client.first())
    with pytest.raises(SaslCredentialError):
        server.evaluate(client.answer(server_first))
    assert not server.complete
    return server_first


def test_scram_unknown_user_fails_like_a_wrong_password_at_the_proof():
    stored = {"alice": ScramCredential.from_password(SCRAM_SHA_256, "alice-secret", 4096)}
    _failure(SCRAM_SHA_256, stored, "alice", "wrong")
    first = _failure(SCRAM_SHA_256, stored, "mallory", "whatever")
    again = _failure(SCRAM_SHA_256, stored, "mallory", "whatever")
    # the fake salt and iterations are stable, as a real user's would be
    assert first.split(b",")[1:] == again.split(b",")[1:]
    assert first.endswith(b",i=4096")


def test_scram_refuses_tokenauth_bad_messages_and_a_foreign_authzid():
    stored = {"alice": ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096)}
    server = ScramServer(SCRAM_SHA_256, stored.get, b"s")
    client = ScramClient(SCRAM_SHA_256, "alice", "pw")
    first = server.evaluate(client.first() + b",tokenauth=true")
    with pytest.raises(SaslCredentialError):
        server.evaluate(client.answer(first))
    with pytest.raises(SaslCredentialError, match="Invalid SCRAM client first message format"):
        ScramServer(SCRAM_SHA_256, stored.get, b"s").evaluate(b"y,,n=alice,r=abc")
    with pytest.raises(SaslAuthenticationError, match="different from username"):
        ScramServer(SCRAM_SHA_256, stored.get, b"s").evaluate(b"n,a=bob,n=alice,r=abc")
    low = {"alice": ScramCredential.from_password(SCRAM_SHA_256, "pw", 1000)}
    with pytest.raises(SaslCredentialError, match="Iterations 1000 is less than the minimum 4096"):
        ScramServer(SCRAM_SHA_256, low.get, b"s").evaluate(b"n,,n=alice,r=abc")


def test_scram_refuses_a_changed_nonce():
    stored = {"alice": ScramCredential.from_password(SCRAM_SHA_512, "pw", 4096)}
    server = ScramServer(SCRAM_SHA_512, stored.get, b"s")
    client = ScramClient(SCRAM_SHA_512, "alice", "pw")
    final = client.answer(server.evaluate(client.first()))
    tampered = final.replace(b",p=", b"x,p=", 1)
    with pytest.raises(SaslCredentialError, match="Invalid client nonce"):
        server.evaluate(tampered)


def test_credential_from_salted_password_is_kafkas_formula():
    salt, salted = b"salt", hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 4096)
    credential = ScramCredential.from_salted_password(SCRAM_SHA_256, salt, salted, 4096)
    assert credential == ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096, salt)


def test_jaas_plain_login_module_with_users():
    entry = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                              'username="admin" password="x" user_admin="x" user_alice="a \\"q\\"";')
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert entry.options["username"] == "admin"
    assert plain_users(entry) == {"admin": "x", "alice": 'a "q"'}


def test_jaas_listener_prefix_wins_over_the_plain_key():
    raw = {"listener.name.sasl_plaintext.plain.sasl.jaas.config": 'M required user_a="1";',
           "sasl.jaas.config": 'M required user_b="2";'}
    assert plain_users(jaas_config_for(raw, "SASL_PLAINTEXT", "PLAIN")) == {"a": "1"}
    assert plain_users(jaas_config_for(raw, "OTHER", "PLAIN")) == {"b": "2"}
    assert jaas_config_for({}, "L", "PLAIN") is None


@pytest.mark.parametrize("text", ['M required user_a="1"', 'M maybe a="1";', 'M required a;',
                                  'M required a="1"; N required b="2";'])
def test_jaas_refuses_malformed_values(text):
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)


def test_scram_accepts_librdkafkas_doubled_client_nonce():
    """librdkafka < 2.6.1 prefixes the server's nonce with its own once more (Kafka 3.8.1 accepts it)."""
    stored = {"alice": ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096)}
    server = ScramServer(SCRAM_SHA_256, stored.get, b"s")
    first = server.evaluate(b"n,,n=alice,r=cnonce")
    nonce = first.split(b",")[0][2:].decode()
    doubled = ScramClient(SCRAM_SHA_256, "alice", "pw", nonce="cnonce")
    final = doubled.answer(first).replace(f"r={nonce}".encode(), f"r=cnonce{nonce}".encode())
    # the proof was computed over the undoubled message: recompute it as librdkafka does
    scram = SCRAM_SHA_256
    salted = scram.salted_password("pw", stored["alice"].salt, 4096)
    without_proof = final.split(b",p=")[0]
    auth = b"n=alice,r=cnonce," + first + b"," + without_proof
    client_key = scram.hmac(salted, b"Client Key")
    proof = bytes(a ^ b for a, b in zip(client_key, scram.hmac(scram.digest(client_key), auth)))
    assert server.evaluate(without_proof + b",p=" + base64.b64encode(proof)).startswith(b"v=")
