"""SASL mechanisms as sans-IO state machines: tokens in, tokens out, no sockets, no clock.

Each server mechanism has ``evaluate(token) -> bytes``, ``complete`` and ``authorization_id``, as a
JDK SaslServer. Failures come in Kafka's two kinds: `SaslAuthenticationError` carries a message the
client may read (Kafka's SaslAuthenticationException), `SaslCredentialError` one it must not see,
because it could tell whether a user exists (Kafka's SaslException; the broker answers a fixed text).
"""

from __future__ import annotations

from typing import Protocol


class SaslError(Exception):
    """Any failed SASL exchange."""


class SaslAuthenticationError(SaslError):
    """A failure whose message goes to the client as it is."""


class SaslCredentialError(SaslError):
    """A failure whose detail stays in the broker: the client gets a fixed message."""


class SaslServer(Protocol):
    mechanism: str

    def evaluate(self, token: bytes) -> bytes: ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...

    @property
    def session_expiry_ms(self) -> int | None:
        """When the credential itself stops being valid (OAUTHBEARER's token expiry), else None."""
        ...
