"""SASL/PLAIN (RFC 4616) on both sides, with Kafka's checks and messages (PlainSaslServer).

The client's one message is ``authzid NUL authcid NUL passwd``. As in Kafka, the authorization id
must be empty or equal the user name, and the password is checked against the JAAS
``user_<name>="<password>"`` options. The comparison takes the same time whether or not the user
exists, so timing does not tell either.
"""

from __future__ import annotations

import hmac
from typing import Callable

from pybroker.security.sasl import SaslAuthenticationError

MECHANISM = "PLAIN"
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"
_ABSENT = b"\x00" * 32  # compared against when the user is unknown


class PlainServer:
    mechanism = MECHANISM
    session_expiry_ms = None

    def __init__(self, password_of: Callable[[str], str | None]) -> None:
        self._password_of = password_of
        self._user: str | None = None

    @property
    def complete(self) -> bool:
        return self._user is not None

    @property
    def authorization_id(self) -> str:
        if self._user is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._user

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        try:
            authzid, username, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._password_of(username)
        matches = hmac.compare_digest(password.encode(), expected.encode() if expected is not None else _ABSENT)
        if expected is None or not matches:
            raise SaslAuthenticationError(INVALID_CREDENTIALS)
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        self._user = username
        return b""


def client_token(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\x00{username}\x00{password}".encode()
