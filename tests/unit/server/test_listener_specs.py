"""The sample SSL config and the listeners built from a config: TLS contexts and principal rules per
listener, the listener.name.<name>. overrides, and the inter-broker client's context."""

from __future__ import annotations

import ssl
from pathlib import Path

from pybroker.common.config import BrokerConfig
from pybroker.security.dev_certs import make_dev_certs
from pybroker.server.listeners import advertised_endpoints, inter_broker_tls, listener_specs

REPO = Path(__file__).resolve().parents[3]


def test_sample_ssl_config_builds_its_listeners(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path)
    config = BrokerConfig.load(str(REPO / "config" / "ssl.properties"),
                               [f"ssl.keystore.location={certs.broker}", f"ssl.truststore.location={certs.ca}"])
    assert config.unknown == []
    specs = listener_specs(config)
    assert [(s.endpoint.listener, s.tls is not None) for s in specs] == [("PLAINTEXT", False), ("SSL", True)]
    assert specs[1].principals is not None and specs[1].principals.name("CN=client,OU=clients") == "client"
    assert inter_broker_tls(config) is None
    assert [e.uri() for e in advertised_endpoints(config.listener_set, {"PLAINTEXT": 9092, "SSL": 9093})] == [
        "PLAINTEXT://127.0.0.1:9092", "SSL://localhost:9093"]


def test_listener_prefixed_keys_win_and_sasl_ssl_ignores_unprefixed_client_auth(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path)
    config = BrokerConfig({
        "listeners": "INTERNAL://:9093,SASL_SSL://:9094", "listener.security.protocol.map": "INTERNAL:SSL,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.broker),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca), "ssl.client.auth": "required",
        "listener.name.internal.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/U"})
    internal, external = listener_specs(config)
    assert internal.tls is not None and internal.tls.verify_mode == ssl.CERT_REQUIRED
    assert external.tls is not None and external.tls.verify_mode == ssl.CERT_NONE  # KIP-684
    assert internal.principals is not None and internal.principals.name("CN=broker,OU=x") == "BROKER"
    client = inter_broker_tls(config)
    assert client is not None and client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
