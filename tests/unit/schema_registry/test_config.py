"""The registry's start-up configuration: a listener URL that cannot be served stops the broker with a
ConfigError naming the key (the broker prints it as one line and exits 1)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pybroker.common.config import BrokerConfig, ConfigError
from pybroker.server.schema_registry import BrokerSchemaRegistry


def registry(listeners: str, **extra: str) -> BrokerSchemaRegistry:
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "schema.registry.listeners": listeners, **extra})
    return BrokerSchemaRegistry(SimpleNamespace(config=config), lambda: None,  # type: ignore[arg-type]
                                inter_broker_tls=None, inter_broker_sasl=None)


@pytest.mark.parametrize("listeners,reason", [
    ("ftp://127.0.0.1:8081", "expected http://host:port"),
    ("http://127.0.0.1", "expected http://host:port"),
    ("http://127.0.0.1:0,http://127.0.0.1:0", "exactly one URL"),
    ("https://127.0.0.1:0", "key store"),  # HTTPS without the broker's ssl.keystore.*
])
def test_unusable_listeners_are_config_errors(listeners: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        registry(listeners)


def test_a_usable_listener() -> None:
    served = registry("http://127.0.0.1:0")
    assert (served.listener.scheme, served.listener.host, served.listener.port) == ("http", "127.0.0.1", 0)
    assert served.server_tls is None and served.authenticate is None


def test_unknown_authentication_methods_are_refused() -> None:
    with pytest.raises(ConfigError, match="schema.registry.authentication.method"):
        registry("http://127.0.0.1:0", **{"schema.registry.authentication.method": "DIGEST"})
