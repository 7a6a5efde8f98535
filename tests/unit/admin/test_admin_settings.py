"""Connection settings from --bootstrap-server, --command-timeout and --command-config."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from pybroker.client.command_line import ClientSettings, UsageError, client_settings
from pybroker.admin.topics import build_parser
from pybroker.security.dev_certs import make_dev_certs


def settings(*argv: str) -> ClientSettings:
    return client_settings(build_parser().parse_args(["--list", *argv]), "tool")


def test_command_config_supplies_client_id_and_timeout(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("client.id=ops\ndefault.api.timeout.ms=2500\nunrelated.key=1\n")
    assert settings("--bootstrap-server", "h:1", "--command-config", str(config)) == ClientSettings("h:1", 2.5, "ops")
    assert settings("--bootstrap-server", "h:1", "--command-config", str(config),
                    "--command-timeout", "700").timeout_s == 0.7
    assert settings("--bootstrap-server", "h:1") == ClientSettings("h:1", 30.0, "tool")


def test_security_settings_we_cannot_honour_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=KERBEROS\n")
    with pytest.raises(UsageError, match="security.protocol=KERBEROS is not supported"):
        settings("--bootstrap-server", "h:1", "--command-config", str(config))
    config.write_text("security.protocol=SSL\nssl.truststore.location=/etc/truststore.jks\n")
    with pytest.raises(UsageError, match="ssl.truststore.type: pybroker reads PEM stores only"):
        settings("--bootstrap-server", "h:1", "--command-config", str(config))


def test_ssl_settings_give_a_verifying_tls_context(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path / "certs")
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
                      f"ssl.keystore.type=PEM\nssl.keystore.location={certs.client}\n")
    tls = settings("--bootstrap-server", "h:1", "--command-config", str(config)).tls
    assert tls is not None and tls.verify_mode == ssl.CERT_REQUIRED and tls.check_hostname
    config.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
                      "ssl.endpoint.identification.algorithm=\n")
    tls = settings("--bootstrap-server", "h:1", "--command-config", str(config)).tls
    assert tls is not None and not tls.check_hostname


def test_zookeeper_replaces_bootstrap_server() -> None:
    assert settings("--zookeeper", "zk:2181/kafka") == ClientSettings("", 30.0, "tool", "zk:2181/kafka")
    with pytest.raises(UsageError, match="Only one of --bootstrap-server or --zookeeper"):
        settings("--zookeeper", "zk:2181", "--bootstrap-server", "h:1")
