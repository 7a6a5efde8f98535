"""Throw-away TLS material for local use and tests: a CA, a broker and a client certificate, as PEM.

    python -m pybroker.security.dev_certs DIR [--host NAME ...]   (or: make certs)

writes ``DIR/ca.pem`` (the trust store), ``DIR/broker.pem`` and ``DIR/client.pem`` (each a PKCS#8
private key followed by its certificate and the CA's: ``ssl.keystore.type=PEM`` key stores). The
broker certificate names ``localhost``, ``127.0.0.1``, ``::1`` and every ``--host``. Nothing here is
fit for production: keys are unencrypted (unless a password is given) and valid for 30 days.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class DevCerts:
    ca: Path
    broker: Path
    client: Path


@dataclass(frozen=True, slots=True)
class _Issued:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


def _name(common_name: str, unit: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pybroker-dev"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(subject: x509.Name, issuer: _Issued | None, *, ca: bool = False, hosts: Sequence[str] = (),
           usage: Sequence[x509.ObjectIdentifier] = ()) -> _Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer.certificate.subject if issuer else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usage)), critical=False)
    signer = issuer.key if issuer else key
    return _Issued(key, builder.sign(signer, hashes.SHA256()))


def _write(path: Path, issued: _Issued, ca: _Issued, password: str | None) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    key = issued.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (issued.certificate, ca.certificate))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "wb") as handle:
        handle.write(key + chain)


def make_dev_certs(directory: Path, hosts: Sequence[str] = (), *, key_password: str | None = None,
                   client_name: str = "client") -> DevCerts:
    """Create the CA, broker and client material in `directory` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _issue(_name("pybroker-dev-ca", "ca"), None, ca=True)
    broker = _issue(_name("broker", "brokers"), ca, hosts=list(dict.fromkeys((*DEFAULT_HOSTS, *hosts))),
                    usage=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH))
    client = _issue(_name(client_name, "clients"), ca, usage=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    result = DevCerts(directory / "ca.pem", directory / "broker.pem", directory / "client.pem")
    result.ca.write_bytes(ca.certificate.public_bytes(serialization.Encoding.PEM))
    _write(result.broker, broker, ca, key_password)
    _write(result.client, client, ca, key_password)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pybroker.security.dev_certs", description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--host", action="append", default=[], help="another name or address for the broker")
    parser.add_argument("--key-password", help="encrypt the private keys (then set ssl.key.password)")
    args = parser.parse_args(argv)
    certs = make_dev_certs(args.directory, args.host, key_password=args.key_password)
    print(f"CA (ssl.truststore.location): {certs.ca}\nbroker key store: {certs.broker}\n"
          f"client key store: {certs.client}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
