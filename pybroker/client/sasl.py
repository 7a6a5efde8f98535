"""SASL for our client: Kafka's client keys, then SaslHandshake v1 and SaslAuthenticate on a new connection.

Keys, as in a Java client's properties (``--command-config``): ``security.protocol`` SASL_PLAINTEXT
or SASL_SSL, ``sasl.mechanism`` (default GSSAPI, as Kafka's; pybroker speaks PLAIN, SCRAM-SHA-256
and SCRAM-SHA-512) and ``sasl.jaas.config`` with ``username="..." password="..."`` options, or
librdkafka's ``sasl.username`` / ``sasl.password``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, TypeVar

from pybroker.client.errors import KafkaClientError, ResponseError, check
from pybroker.client.versions import NegotiatedVersions
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pybroker.protocol.schema import Message
from pybroker.security.sasl import SaslError
from pybroker.security.sasl.jaas import JaasConfigError, parse_jaas_config
from pybroker.security.sasl.plain import MECHANISM as PLAIN
from pybroker.security.sasl.plain import client_token
from pybroker.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from pybroker.security.sasl.scram import ScramClient

M = TypeVar("M", bound=Message)

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED = (PLAIN, *SCRAM_MECHANISMS)


class SaslConfigError(KafkaClientError, ValueError):
    """Client SASL settings that cannot work; the message names the key."""


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> "SaslCredentials | None":
        """The credentials a SASL ``security.protocol`` asks for; None for PLAINTEXT and SSL."""
        protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in SASL_PROTOCOLS:
            return None
        mechanism = properties.get("sasl.mechanism", properties.get("sasl.mechanisms", "GSSAPI")).strip()
        if mechanism not in SUPPORTED:
            raise SaslConfigError(f"Invalid value {mechanism} for configuration sasl.mechanism: pybroker's client "
                                  f"supports {', '.join(SUPPORTED)}")
        username, password = properties.get("sasl.username"), properties.get("sasl.password")
        if properties.get("sasl.jaas.config"):
            try:
                options = parse_jaas_config(properties["sasl.jaas.config"]).options
            except JaasConfigError as exc:
                raise SaslConfigError(f"Invalid value for configuration sasl.jaas.config: {exc}") from None
            username, password = options.get("username", username), options.get("password", password)
        if not username or password is None:
            raise SaslConfigError(f"Missing configuration sasl.jaas.config: {mechanism} needs username=\"...\" "
                                  "and password=\"...\" (or sasl.username and sasl.password)")
        return cls(mechanism, username, password)


class SaslChannel(Protocol):
    """What the exchange needs of a connection (connection.py's Connection, which runs it as it opens): the
    versions it negotiated and a request sent at an explicit version."""

    @property
    def versions(self) -> NegotiatedVersions: ...

    async def send_at(self, request: Message, version: int, response_type: type[M], *,
                      timeout: float | None = None) -> M: ...


async def authenticate(connection: SaslChannel, credentials: SaslCredentials) -> int:
    """Run the exchange on a fresh connection; the session lifetime the broker granted (ms, 0: none).
    Raises ResponseError (UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED) as the broker answered."""
    handshake = await connection.send_at(SaslHandshakeRequest(mechanism=credentials.mechanism), 1,
                                         SaslHandshakeResponse)
    if handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        raise ResponseError(handshake.error_code, f"Client SASL mechanism '{credentials.mechanism}' not enabled in "
                                                  f"the server, enabled mechanisms are {handshake.mechanisms}")
    check(handshake.error_code)
    version = connection.versions.version_for(SaslAuthenticateRequest.API_KEY, 0)

    async def exchange(token: bytes) -> SaslAuthenticateResponse:
        response = await connection.send_at(SaslAuthenticateRequest(auth_bytes=token), version,
                                            SaslAuthenticateResponse)
        check(response.error_code, response.error_message)
        return response

    if credentials.mechanism == PLAIN:
        response = await exchange(client_token(credentials.username, credentials.password))
        return response.session_lifetime_ms
    scram = ScramClient(SCRAM_MECHANISMS[credentials.mechanism], credentials.username, credentials.password)
    first = await exchange(scram.first())
    try:
        final = await exchange(scram.answer(bytes(first.auth_bytes)))
        scram.verify(bytes(final.auth_bytes))
    except SaslError as exc:
        raise ResponseError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)) from None
    return final.session_lifetime_ms
