"""Shared TLS set-up for integration tests: throw-away certificates in a tmp dir, and a broker with a
PLAINTEXT and an SSL listener whose bound ports are read from its log."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

from pybroker.security.dev_certs import DevCerts
from tests.integration.broker_process import BrokerProcess

BOUND = re.compile(r"Awaiting socket connections on [^ ]+:(\d+) \(listener (\w+)")


def tls_overrides(certs: DevCerts, **extra: str) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.broker), "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca), **extra}


def start_tls_broker(data_dir: Path, certs: DevCerts, **extra: str) -> tuple[BrokerProcess, dict[str, int]]:
    """A started broker and its bound port per listener name."""
    broker = BrokerProcess(data_dir, tls_overrides(certs, **extra)).start()
    ports = {name: int(port) for line in broker.log_lines if (m := BOUND.search(line)) for port, name in [m.groups()]}
    return broker, ports


def client_tls(certs: DevCerts, *, with_certificate: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if with_certificate:
        context.load_cert_chain(str(certs.client))
    return context
