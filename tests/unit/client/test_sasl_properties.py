"""Kafka's client security keys as our client reads them from --command-config."""

from __future__ import annotations

import pytest

from pybroker.client.sasl import SaslConfigError, SaslCredentials

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="a b";'


def test_plaintext_and_ssl_need_no_sasl():
    assert SaslCredentials.from_properties({}) is None
    assert SaslCredentials.from_properties({"security.protocol": "SSL"}) is None


def test_java_client_keys():
    credentials = SaslCredentials.from_properties({"security.protocol": "SASL_PLAINTEXT",
                                                   "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS})
    assert credentials == SaslCredentials("SCRAM-SHA-512", "alice", "a b")
    assert "a b" not in repr(credentials)


def test_librdkafka_keys():
    credentials = SaslCredentials.from_properties({"security.protocol": "sasl_ssl", "sasl.mechanisms": "PLAIN",
                                                   "sasl.username": "bob", "sasl.password": "pw"})
    assert credentials == SaslCredentials("PLAIN", "bob", "pw")


@pytest.mark.parametrize("properties, key", [
    ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism"),  # GSSAPI by default, as Kafka
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "x"}, "sasl.jaas.config"),
])
def test_unusable_settings_name_the_key(properties, key):
    with pytest.raises(SaslConfigError, match=key):
        SaslCredentials.from_properties(properties)
