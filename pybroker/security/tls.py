"""TLS contexts from Kafka's ``ssl.*`` keys, for SSL and SASL_SSL listeners and for our client.

Only PEM material is read (``ssl.keystore.type=PEM``, ``ssl.truststore.type=PEM``): a key store is
one PEM file holding the private key and the certificate chain (``ssl.keystore.location``), or the
two inline (``ssl.keystore.certificate.chain``, ``ssl.keystore.key``), the key optionally encrypted
with ``ssl.key.password``; trusted CAs are a PEM file (``ssl.truststore.location``) or inline
(``ssl.truststore.certificates``). JKS and PKCS12 stores are refused with the key named (they can
come later). The broker reads each key per listener: ``listener.name.<name>.<key>`` first.

Differences from Kafka, because OpenSSL does the work: ``ssl.cipher.suites`` takes OpenSSL's cipher
names and restricts TLS 1.2 only; without a trust store the system's CAs are trusted (Kafka: the
JVM's); ``ssl.protocol`` is not used (``ssl.enabled.protocols`` bounds the versions).
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from dataclasses import dataclass
from typing import Callable

from pybroker.common.config import CONFIG_KEYS, BrokerConfig, ConfigError, value_text

Lookup = Callable[[str], "tuple[str, str] | None"]
"""A key's (name as configured, text), or None when it is not set."""

_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1.2": ssl.TLSVersion.TLSv1_2,
             "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The ``ssl.*`` keys of one listener (or one client), each with the name it was configured by."""

    values: dict[str, tuple[str, str | None]]  # key -> (configured name, text or None)

    @classmethod
    def from_lookup(cls, lookup: Lookup) -> "TlsSettings":
        values: dict[str, tuple[str, str | None]] = {}
        for key in (k for k in CONFIG_KEYS if k.startswith("ssl.")):
            found = lookup(key)
            values[key] = found if found is not None else (key, value_text(CONFIG_KEYS[key].default))
        return cls(values)

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> "TlsSettings":
        """A client's settings (``--command-config``)."""
        return cls.from_lookup(lambda key: (key, properties[key]) if key in properties else None)

    def text(self, key: str) -> str | None:
        return self.values[key][1]

    def name(self, key: str) -> str:
        return self.values[key][0]

    def items(self, key: str) -> list[str]:
        return [item.strip() for item in (self.text(key) or "").split(",") if item.strip()]

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"Invalid value {self.text(key)} for configuration {self.name(key)}: {message}")


def broker_settings(config: BrokerConfig, listener: str, security_protocol: str) -> TlsSettings:
    """One listener's settings. As in Kafka (KIP-684), ``ssl.client.auth`` applies to a SASL_SSL
    listener only when set with the listener's prefix: SASL authenticates its clients."""
    prefix = f"listener.name.{listener.lower()}."

    def lookup(key: str) -> tuple[str, str] | None:
        if prefix + key in config.raw:
            return prefix + key, config.raw[prefix + key]
        if key == "ssl.client.auth" and security_protocol == "SASL_SSL":
            return None
        return (key, config.raw[key]) if key in config.raw else None

    return TlsSettings.from_lookup(lookup)


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A listener's context: our certificate always, client certificates as ``ssl.client.auth`` says."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(context, settings)
    if not _load_keystore(context, settings):
        raise ConfigError(f"A TLS listener needs a key store: set {settings.name('ssl.keystore.location')} "
                          f"(or {settings.name('ssl.keystore.certificate.chain')} and "
                          f"{settings.name('ssl.keystore.key')}) with {settings.name('ssl.keystore.type')}=PEM")
    auth = settings.text("ssl.client.auth") or "none"
    if auth not in _CLIENT_AUTH:
        raise settings.error("ssl.client.auth", "String must be one of: none, requested, required")
    context.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none":
        _load_truststore(context, settings, ssl.Purpose.CLIENT_AUTH)
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's context: the server's certificate verified against the trust store, its host name
    checked unless ``ssl.endpoint.identification.algorithm`` is empty; our certificate if configured."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(context, settings)
    algorithm = (settings.text("ssl.endpoint.identification.algorithm") or "").strip().lower()
    if algorithm not in ("", "https"):
        raise settings.error("ssl.endpoint.identification.algorithm", "only https or an empty value are supported")
    context.check_hostname = algorithm == "https"
    _load_truststore(context, settings, ssl.Purpose.SERVER_AUTH)
    _load_keystore(context, settings)
    return context


def _common(context: ssl.SSLContext, settings: TlsSettings) -> None:
    enabled = settings.items("ssl.enabled.protocols")
    unknown = [v for v in enabled if v not in _VERSIONS]
    if unknown or not enabled:
        raise settings.error("ssl.enabled.protocols", f"expected some of {', '.join(_VERSIONS)}")
    versions = sorted(_VERSIONS[v] for v in enabled)
    try:
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
    except (ValueError, ssl.SSLError) as exc:
        raise settings.error("ssl.enabled.protocols", str(exc)) from None
    ciphers = [c for c in settings.items("ssl.cipher.suites") if not c.startswith(("TLS_AES_", "TLS_CHACHA20_"))]
    if ciphers:
        try:
            context.set_ciphers(":".join(ciphers))
        except ssl.SSLError:
            raise settings.error("ssl.cipher.suites", "no cipher can be selected (give OpenSSL's names, "
                                 "e.g. ECDHE-RSA-AES128-GCM-SHA256)") from None


def _check_pem(settings: TlsSettings, key: str) -> None:
    kind = (settings.text(key) or "").upper()
    if kind != "PEM":
        raise settings.error(key, "pybroker reads PEM stores only (set it to PEM; JKS and PKCS12 are not "
                                  "supported yet)")


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> bool:
    """Our certificate and key, if configured; False when none is."""
    location = settings.text("ssl.keystore.location")
    chain, key = settings.text("ssl.keystore.certificate.chain"), settings.text("ssl.keystore.key")
    if not location and not chain and not key:
        return False
    _check_pem(settings, "ssl.keystore.type")
    if settings.text("ssl.keystore.password"):
        raise settings.error("ssl.keystore.password", "a PEM key store takes no store password, only "
                                                      "ssl.key.password for an encrypted key")
    password = settings.text("ssl.key.password") or None
    if location:
        if chain or key:
            raise settings.error("ssl.keystore.location", "set either a key store file or the inline "
                                                          "certificate chain and key, not both")
        _load_chain(context, settings, "ssl.keystore.location", location, password)
        return True
    if not chain or not key:
        missing = "ssl.keystore.key" if chain else "ssl.keystore.certificate.chain"
        raise ConfigError(f"Missing required configuration {settings.name(missing)} for an inline PEM key store")
    with tempfile.TemporaryDirectory(prefix="pybroker-tls-") as directory:  # mode 0700
        path = os.path.join(directory, "keystore.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w", encoding="ascii") as handle:
            handle.write(_pem_text(key) + "\n" + _pem_text(chain) + "\n")
        _load_chain(context, settings, "ssl.keystore.certificate.chain", path, password)
    return True


def _load_chain(context: ssl.SSLContext, settings: TlsSettings, key: str, path: str, password: str | None) -> None:
    try:
        context.load_cert_chain(path, password=password if password is not None else _no_password)
    except OSError as exc:  # ssl.SSLError is one too
        reason = exc.strerror or getattr(exc, "reason", None) or str(exc)  # SSLError has a reason
        if password is None and "password" in str(reason).lower():
            reason = "the private key is encrypted: set ssl.key.password"
        raise settings.error(key, f"cannot load the key and certificate chain: {reason}") from None


def _no_password() -> str:
    raise ssl.SSLError("the private key is encrypted: set ssl.key.password")


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings, purpose: ssl.Purpose) -> None:
    location, inline = settings.text("ssl.truststore.location"), settings.text("ssl.truststore.certificates")
    if not location and not inline:
        context.load_default_certs(purpose)
        return
    _check_pem(settings, "ssl.truststore.type")
    key = "ssl.truststore.location" if location else "ssl.truststore.certificates"
    try:
        if location:
            context.load_verify_locations(cafile=location)
        else:
            context.load_verify_locations(cadata=_pem_text(inline or ""))
    except (OSError, ValueError) as exc:
        raise settings.error(key, f"cannot load the trusted certificates: {getattr(exc, 'strerror', None) or exc}") \
            from None


def _pem_text(value: str) -> str:
    """Inline PEM as a properties file carries it: Kafka allows the line breaks to be lost."""
    text = value.strip()
    if "\n" in text:
        return text
    return re.sub(r"(-----BEGIN [A-Z ]+-----)\s*(.*?)\s*(-----END [A-Z ]+-----)",
                  lambda m: f"{m.group(1)}\n" + "\n".join(m.group(2).split()) + f"\n{m.group(3)}", text)
