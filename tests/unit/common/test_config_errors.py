"""Every broker key with a bad value of each kind it can have stops `pybroker serve` before the broker starts,
with one line on stderr naming the key as the user wrote it and exit code 1.

The bad values come from each key's declaration: text for a number or a boolean, a number past its type's range,
one below an `at_least` bound or outside a `between` range, a word outside a `one_of` list. Keys whose value is
free text (names, paths, secrets) have no such value: the semantic checks a few of them get are listed in
SEMANTIC, the others in FREE_TEXT with the reason. Topic keys, checked on the wire, are in
tests/integration/test_config_errors.py.
"""

from __future__ import annotations

from typing import Iterator

import pytest

import pybroker.__main__ as cli
from pybroker.common.config import CONFIG_KEYS, INT_MAX, LONG_MAX, AtLeast, Between, ConfigKey, OneOf

LIMITS = {"int": INT_MAX, "long": LONG_MAX}
PLAIN_USERS = {"listener.name.sasl_plaintext.plain.sasl.jaas.config":
               'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a" '
               'user_admin="a";'}

# key -> (a bad value, the other overrides that make the key matter)
SEMANTIC: dict[str, tuple[str, dict[str, str]]] = {
    "listeners": ("localhost:9092", {}),
    "advertised.listeners": ("PLAINTEXT://nowhere", {}),
    "listener.security.protocol.map": ("PLAINTEXT:TELNET", {}),
    "inter.broker.listener.name": ("INTERNAL", {}),
    "control.plane.listener.name": ("PLAINTEXT", {}),
    "sasl.enabled.mechanisms": ("GSSAPI", {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                           "security.inter.broker.protocol": "SASL_PLAINTEXT"}),
    "sasl.mechanism.inter.broker.protocol": ("KERBEROS", {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                                          "security.inter.broker.protocol": "SASL_PLAINTEXT",
                                                          "sasl.enabled.mechanisms": "PLAIN", **PLAIN_USERS}),
    "sasl.jaas.config": ("not a jaas config", {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                               "security.inter.broker.protocol": "SASL_PLAINTEXT",
                                               "sasl.enabled.mechanisms": "PLAIN",
                                               "sasl.mechanism.inter.broker.protocol": "PLAIN"}),
    "max.connections.per.ip.overrides": ("localhost", {}),
    "log.retention.minutes": ("forever", {}),
    "log.retention.hours": ("1.5", {}),
    "schema.registry.listeners": ("localhost:8081", {}),
    "schema.registry.topic": ("no spaces", {"schema.registry.listeners": "http://127.0.0.1:0"}),
}
FREE_TEXT = {
    "broker.rack": "any name",
    "zookeeper.connect": "reached at start-up: an unreachable ensemble is an error line (tests/cluster)",
    "ssl.keystore.type": "checked when an SSL listener loads its key store (tests/integration/test_tls.py)",
    "ssl.keystore.location": "a path, read when an SSL listener loads it (tests/integration/test_tls.py)",
    "ssl.keystore.password": "a secret",
    "ssl.keystore.certificate.chain": "PEM text, read when an SSL listener loads it",
    "ssl.keystore.key": "PEM text, read when an SSL listener loads it",
    "ssl.key.password": "a secret",
    "ssl.truststore.type": "checked when an SSL listener loads its trust store (tests/integration/test_tls.py)",
    "ssl.truststore.location": "a path, read when an SSL listener loads it",
    "ssl.truststore.password": "a secret",
    "ssl.truststore.certificates": "PEM text, read when an SSL listener loads it",
    "ssl.protocol": "accepted for compatibility, not used",
    "ssl.cipher.suites": "OpenSSL's cipher names, checked when an SSL listener builds its context",
    "ssl.endpoint.identification.algorithm": "https or empty; anything else disables the check, as in Kafka",
    "ssl.principal.mapping.rules": "parsed with an SSL listener (tests/unit/security/test_principal.py)",
    "sasl.server.callback.handler.class": "checked with an OAUTHBEARER listener (tests/integration/test_oauthbearer.py)",
    "sasl.oauthbearer.jwks.endpoint.url": "checked with an OAUTHBEARER listener (tests/integration/test_oauthbearer.py)",
    "sasl.oauthbearer.expected.audience": "any names",
    "sasl.oauthbearer.expected.issuer": "any name",
    "sasl.oauthbearer.sub.claim.name": "any claim name",
    "sasl.oauthbearer.scope.claim.name": "any claim name",
    "authorizer.class.name": "any class name other than Kafka's two means no authorizer, as an empty one",
    "super.users": "principals; a malformed one matches no one",
    "metrics.host": "a host name, bound at start-up",
    "log.dir": "a path, created at start-up",
    "log.dirs": "paths, created at start-up",
}


def refused_values(kind: str, validator: object) -> Iterator[str]:
    """The values of each kind that a key of this type and validator refuses."""
    if kind in LIMITS:
        yield from ("many", "1.5", str(LIMITS[kind] + 1))
    elif kind == "double":
        yield "half"
    elif kind == "boolean":
        yield "maybe"
    if isinstance(validator, AtLeast):
        yield str(validator.minimum - 1)
    elif isinstance(validator, Between):
        yield from (str(validator.minimum - 1), str(validator.maximum + 1))
    elif isinstance(validator, OneOf):
        yield "bogus"


def bad_values(key: ConfigKey) -> Iterator[str]:
    return refused_values(key.type, key.validator)


CASES = [(key.name, value, {}) for key in CONFIG_KEYS.values() for value in bad_values(key)] + \
        [(name, value, extra) for name, (value, extra) in SEMANTIC.items()]


def test_every_key_has_a_bad_value_or_a_reason_for_having_none() -> None:
    covered = {name for name, _, _ in CASES}
    assert sorted(set(CONFIG_KEYS) - covered - set(FREE_TEXT)) == []
    assert sorted(covered & set(FREE_TEXT)) == []


@pytest.fixture(autouse=True)
def never_start(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A value the checks let through would start a broker: the test fails instead."""
    async def started(_config: object) -> int:
        raise AssertionError("the broker would have started")

    monkeypatch.setattr(cli, "_serve", started)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)


@pytest.mark.parametrize(("key", "value", "extra"), CASES, ids=[f"{k}={v}" for k, v, _ in CASES])
def test_a_bad_value_is_one_line_naming_the_key(key: str, value: str, extra: dict[str, str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    overrides = [f"{k}={v}" for k, v in {**extra, key: value}.items()]
    assert cli.main(["serve", *[arg for pair in overrides for arg in ("--override", pair)]]) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pybroker: "), captured.err
    assert key in lines[0], lines[0]
    assert captured.out == ""


def test_a_broker_default_that_a_topic_key_refuses_names_the_broker_key(capsys: pytest.CaptureFixture[str]) -> None:
    """log.roll.ms has no bound of its own (as in Kafka); segment.ms, which it provides, refuses 0."""
    assert cli.main(["serve", "--override", "log.roll.ms=0"]) == 1
    assert capsys.readouterr().err == "pybroker: Invalid value 0 for configuration log.roll.ms: Value must be at least 1\n"
    assert cli.main(["serve", "--override", "log.flush.scheduler.interval.ms=-5"]) == 1
    assert "configuration log.flush.scheduler.interval.ms:" in capsys.readouterr().err


def test_negative_retention_is_unlimited_as_in_kafka() -> None:
    from pybroker.common.config import BrokerConfig

    assert BrokerConfig({"log.retention.ms": "-5"}).retention_ms == -1
    assert BrokerConfig({"log.retention.hours": "-1"}).retention_ms == -1
