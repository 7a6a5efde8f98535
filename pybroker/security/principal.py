"""Who a connection is: Kafka's principal (`User:alice`) and how a TLS client's certificate names it.

A TLS client with a certificate is ``User:<name>``, the name being the certificate's subject
distinguished name in RFC 2253 form (as Java's ``X500Principal.getName()`` prints it, the last RDN
first) passed through ``ssl.principal.mapping.rules``; without a certificate it is
``User:ANONYMOUS``, as on a PLAINTEXT listener. The rules are Kafka's (SslPrincipalMapper):
``RULE:pattern/replacement/[L|U]`` entries and ``DEFAULT`` (the DN unchanged), comma-separated and
tried in order; the first whose pattern matches the whole DN gives the name; none matching fails
the authentication.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pybroker.common.config import ConfigError

if TYPE_CHECKING:  # cryptography's x509 loads with the first client certificate, not at the broker's start
    from cryptography import x509

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


class NoMatchingRule(ValueError):
    """No principal mapping rule applies to a certificate's name: the client is refused."""


# Kafka's grammar, verbatim in meaning: a rule, then optional spaces and a comma or the end.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` parsed once; ConfigError naming the key for a bad rule."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        for text in (m.group(1) for m in _SPLITTER.finditer(rules.strip())):
            match = _PARSER.match(text)
            if match is None or match.end() != len(text):
                rest = text[match.end():] if match else text
                raise ConfigError(f"Invalid value {rules} for configuration ssl.principal.mapping.rules: "
                                  f"Invalid rule: `{text}`, unmatched substring: `{rest}`")
            if match.group(1):
                self.rules.append(_Rule(None))
            elif match.group(2) is not None:
                try:
                    pattern = re.compile(match.group(2))
                except re.error as exc:
                    raise ConfigError(f"Invalid value {rules} for configuration ssl.principal.mapping.rules: "
                                      f"{exc}") from None
                self.rules.append(_Rule(pattern, match.group(4), match.group(6)))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {dn}")

    def principal(self, certificate_der: bytes | None) -> KafkaPrincipal:
        """The principal of a TLS peer from its (already verified) certificate, if it sent one."""
        if certificate_der is None:
            return ANONYMOUS
        return KafkaPrincipal(USER_TYPE, self.name(rfc2253_subject(certificate_der)))


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java's replacement syntax: ``$n`` a group (digits taken while a group of that number exists,
    a reference to no group kept as literal text, as Kafka escapes it), ``\\x`` the character x."""
    out, i, groups = [], 0, match.re.groups
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif char == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j, number = i + 2, int(replacement[i + 1])
            if number > groups:
                out.append(replacement[i:i + 2])
                i += 2
                continue
            while j < len(replacement) and replacement[j].isdigit() and number * 10 + int(replacement[j]) <= groups:
                number, j = number * 10 + int(replacement[j]), j + 1
            out.append(match.group(number) or "")
            i = j
        else:
            out.append(char)
            i += 1
    return "".join(out)


# RFC 2253's keywords; Java prints every other attribute as OID=#<hex of its DER value>.
@functools.cache
def _keywords() -> dict[x509.ObjectIdentifier, str]:
    from cryptography.x509.oid import NameOID

    return {NameOID.COMMON_NAME: "CN", NameOID.LOCALITY_NAME: "L", NameOID.STATE_OR_PROVINCE_NAME: "ST",
            NameOID.ORGANIZATION_NAME: "O", NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.COUNTRY_NAME: "C",
            NameOID.STREET_ADDRESS: "STREET", NameOID.DOMAIN_COMPONENT: "DC", NameOID.USER_ID: "UID"}


def rfc2253_subject(certificate_der: bytes) -> str:
    """The subject DN as Java's X500Principal.getName() writes it (RFC 2253: last RDN first)."""
    from cryptography import x509

    subject = x509.load_der_x509_certificate(certificate_der).subject
    rdns = []
    for rdn in reversed(list(subject.rdns)):
        rdns.append("+".join(_attribute(attribute) for attribute in rdn))
    return ",".join(rdns)


def _attribute(attribute: x509.NameAttribute) -> str:
    value = attribute.value if isinstance(attribute.value, str) else attribute.value.decode("latin-1")
    keyword = _keywords().get(attribute.oid)
    if keyword is None:
        raw = value.encode("utf-8")
        tag = attribute._type.value  # the ASN.1 string type, as the DER value's tag
        return f"{attribute.oid.dotted_string}=#{bytes([tag]).hex()}{_der_length(len(raw))}{raw.hex()}"
    return f"{keyword}={_escape(value)}"


def _der_length(length: int) -> str:
    if length < 0x80:
        return f"{length:02x}"
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return f"{0x80 | len(encoded):02x}{encoded.hex()}"


def _escape(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
