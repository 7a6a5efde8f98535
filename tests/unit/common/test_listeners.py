"""Kafka's start-up checks of listeners, advertised listeners and the inter-broker listener."""

from __future__ import annotations

import pytest

from pybroker.common.config import BrokerConfig, ConfigError
from pybroker.common.listeners import Endpoint


def test_several_listeners_with_a_custom_protocol_map() -> None:
    config = BrokerConfig({"listeners": "INTERNAL://127.0.0.1:9092,external://:9093",
                           "advertised.listeners": "INTERNAL://b1:9092,EXTERNAL://public:19093",
                           "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SASL_SSL",
                           "inter.broker.listener.name": "INTERNAL"})
    listeners = config.listener_set
    assert listeners.bound == (Endpoint("INTERNAL", "127.0.0.1", 9092, "SSL"), Endpoint("EXTERNAL", "", 9093, "SASL_SSL"))
    assert listeners.advertised_endpoint("EXTERNAL") == Endpoint("EXTERNAL", "public", 19093, "SASL_SSL")
    assert listeners.inter_broker == "INTERNAL"


def test_security_inter_broker_protocol_names_the_listener() -> None:
    config = BrokerConfig({"listeners": "PLAINTEXT://:9092,SSL://:9093", "security.inter.broker.protocol": "SSL"})
    assert config.listener_set.inter_broker == "SSL"


@pytest.mark.parametrize("values, message", [
    ({"listeners": "INTERNAL://:9092"}, "No security protocol defined for listener INTERNAL"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "Each listener must have a different name"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "Each listener must have a different port"),
    ({"listeners": "SSL://:9093", "advertised.listeners": "PLAINTEXT://h:9092"},
     "advertised.listeners listener names must be equal to or a subset"),
    ({"listeners": "SSL://:9093"}, "inter.broker.listener.name must be a listener name defined in advertised"),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"}, "Only one of inter.broker.listener.name and security.inter"),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "OTHER"},
     "OTHER defined in inter.broker.listener.name not found in listener.security.protocol.map"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://:9092", "control.plane.listener.name": "CONTROL"},
     "control.plane.listener.name must be a listener name defined in listeners"),
])
def test_inconsistent_listeners_fail_with_kafkas_message(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(values)


def test_listener_overrides_are_known_configs() -> None:
    config = BrokerConfig({"listener.name.ssl.ssl.keystore.location": "/k.pem", "listener.name.ssl.bogus": "x"})
    assert config.unknown == ["listener.name.ssl.bogus"]
