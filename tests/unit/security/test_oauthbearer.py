"""OAUTHBEARER as pure functions: RFC 7628's client response, Kafka's error challenge and ^A ending,
the unsecured validator's checks and options, and JWT validation against a JWKS file with PyJWT."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from pybroker.security.sasl import SaslAuthenticationError, SaslCredentialError
from pybroker.security.sasl.jwt_validator import JwtSettings, JwtValidator, KeySet
from pybroker.security.sasl.oauthbearer import (
    ClientResponse,
    InvalidToken,
    OAuthBearerServer,
    UnsecuredValidator,
    unsecured_token,
)

NOW_S = 1_700_000_000


def server(validator=UnsecuredValidator(), now_s: float = NOW_S) -> OAuthBearerServer:
    return OAuthBearerServer(validator, lambda: int(now_s * 1000))


def test_client_response_round_trip_with_authzid_and_extensions():
    response = ClientResponse("abc.def.", "alice", {"traceId": "123", "logicalCluster": "lkc-1"})
    assert response.to_bytes() == b"n,a=alice,\x01auth=Bearer abc.def.\x01traceId=123\x01logicalCluster=lkc-1\x01\x01"
    assert ClientResponse.parse(response.to_bytes()) == response


@pytest.mark.parametrize("message", [b"n,,auth=Bearer x\x01\x01", b"n,,\x01auth=Bearer x\x01",
                                     b"n,,\x01auth=Bearer\x01\x01", b"n,,\x01auth=Basic abc\x01\x01",
                                     b"n,,\x01traceId=1\x01\x01", b"\xff"])
def test_malformed_client_responses_fail_without_detail(message):
    with pytest.raises(SaslCredentialError):
        server().evaluate(message)


def test_unsecured_token_authenticates_its_subject_until_it_expires():
    mechanism = server()
    assert mechanism.evaluate(ClientResponse(unsecured_token("alice", 3600, NOW_S)).to_bytes()) == b""
    assert mechanism.complete and mechanism.authorization_id == "alice"
    assert mechanism.session_expiry_ms == (NOW_S + 3600) * 1000


def test_invalid_token_gets_the_json_challenge_then_fails_with_it():
    mechanism = server(now_s=NOW_S + 7200)
    challenge = mechanism.evaluate(ClientResponse(unsecured_token("alice", 3600, NOW_S)).to_bytes())
    assert challenge == b'{"status":"invalid_token"}' and not mechanism.complete
    with pytest.raises(SaslAuthenticationError, match='^{"status":"invalid_token"}$'):
        mechanism.evaluate(b"\x01")


def test_authzid_must_be_the_principal():
    with pytest.raises(SaslAuthenticationError, match=r"authorization id \(bob\) that is different from the "
                                                      r"token's principal name \(alice\)"):
        server().evaluate(ClientResponse(unsecured_token("alice", 60, NOW_S), "bob").to_bytes())


@pytest.mark.parametrize("token, reason", [
    (unsecured_token("alice", 60, NOW_S) + "c2ln", "must not contain a digital signature"),
    ("eyJhbGciOiJIUzI1NiJ9." + unsecured_token("alice", 60, NOW_S).split(".")[1] + ".", "'none' for an algorithm"),
    ("a.b", "3 dot-separated"),
    (unsecured_token("alice", 60, NOW_S, exp=None), "No expiration time"),
    (unsecured_token("", 60, NOW_S), "No principal name"),
    (unsecured_token("alice", 60, NOW_S + 10), "Issued At value"),
    (unsecured_token("alice", 0, NOW_S - 10), "Expiration Time"),
])
def test_unsecured_validator_refusals(token, reason):
    with pytest.raises(InvalidToken, match=reason):
        UnsecuredValidator().validate(token, NOW_S * 1000)


def test_unsecured_validator_options():
    validator = UnsecuredValidator.from_options({
        "unsecuredValidatorPrincipalClaimName": "client_id", "unsecuredValidatorScopeClaimName": "scp",
        "unsecuredValidatorRequiredScope": "kafka write", "unsecuredValidatorAllowableClockSkewMs": "5000"})
    token = unsecured_token("ignored", 60, NOW_S + 4, client_id="svc", scp=["kafka", "write"])
    assert validator.validate(token, NOW_S * 1000).principal == "svc"  # iat 4 s ahead: within the skew
    with pytest.raises(InvalidToken) as info:
        validator.validate(unsecured_token("x", 60, NOW_S, client_id="svc", scp="kafka"), NOW_S * 1000)
    assert info.value.json() == '{"status":"insufficient_scope", "scope":"[kafka, write]"}'
    with pytest.raises(ValueError, match="must not be negative"):
        UnsecuredValidator.from_options({"unsecuredValidatorAllowableClockSkewMs": "-1"})


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks_file(path: Path, key: rsa.RSAPrivateKey, kid: str = "k1") -> Path:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    path.write_text(json.dumps({"keys": [{**public, "kid": kid, "use": "sig"}]}))
    return path


def signed(key: rsa.RSAPrivateKey, kid: str = "k1", **claims) -> str:
    now = int(time.time())
    body = {"sub": "alice", "iat": now, "exp": now + 600, "aud": "kafka", "iss": "https://idp", **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm="RS256",
                      headers={"kid": kid})


def test_jwt_validator_accepts_a_signed_token_and_refuses_bad_ones(tmp_path, signing_key):
    keys = KeySet(jwks_file(tmp_path / "jwks.json", signing_key).as_uri(), 3_600_000, 100)
    validator = JwtValidator(JwtSettings(keys.url, ("kafka",), "https://idp"), keys)
    now_ms = int(time.time() * 1000)
    valid = validator.validate(signed(signing_key, scope="a b"), now_ms)
    assert valid.principal == "alice" and valid.scope == frozenset({"a b"})
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for token, reason in [(signed(signing_key, exp=int(time.time()) - 60), "expired"),
                          (signed(signing_key, aud="other"), "Audience doesn't match"),
                          (signed(signing_key, iss="https://evil"), "(?i)issuer"),
                          (signed(other), "Signature verification failed"),
                          (signed(signing_key, kid="unknown"), "no key with kid 'unknown'"),
                          (signed(signing_key, iat=None), "iat"),
                          (unsecured_token("alice", 60, time.time()), "not allowed")]:
        with pytest.raises(InvalidToken, match=reason):
            validator.validate(token, now_ms)


def test_jwks_file_is_read_again_when_it_changes(tmp_path, signing_key):
    path = jwks_file(tmp_path / "jwks.json", signing_key)
    keys = KeySet(path.as_uri(), 3_600_000, 100)
    validator = JwtValidator(JwtSettings(keys.url), keys)
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks_file(path, rotated, kid="k2")
    os.utime(path, (time.time() + 5, time.time() + 5))  # a new mtime even within the file system's granularity
    assert validator.validate(signed(rotated, kid="k2"), int(time.time() * 1000)).principal == "alice"
