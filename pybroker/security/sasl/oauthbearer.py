"""SASL/OAUTHBEARER (RFC 7628) as Kafka speaks it (OAuthBearerSaslServer), and Kafka's unsecured
token validator for development (OAuthBearerUnsecuredValidatorCallbackHandler).

The client's one message (OAuthBearerClientInitialResponse)::

    n,[a=<authzid>],^Aauth=Bearer <token>[^A<key>=<value>...]^A^A

A valid token completes the exchange with an empty answer; the principal is the token's principal
claim, and the session ends when the token expires (KIP-368). An invalid token is answered with an
error JSON challenge, ``{"status":"invalid_token"}`` (RFC 7628 section 3.2.2); the client then sends
a single ^A and gets SASL_AUTHENTICATION_FAILED whose message is that JSON. Extensions are accepted
and ignored, as both of Kafka's validators accept every extension.

The unsecured validator takes JWS tokens with ``alg`` ``none`` and no signature (librdkafka's
``enable.sasl.oauthbearer.unsecure.jwt``). Its JAAS options: ``unsecuredValidatorPrincipalClaimName``
(default ``sub``), ``unsecuredValidatorScopeClaimName`` (``scope``), ``unsecuredValidatorRequiredScope``
(space-separated) and ``unsecuredValidatorAllowableClockSkewMs`` (0). ``exp`` is required; ``iat``,
when present, must not lie in the future; both must be finite numbers of seconds whose milliseconds
fit a long, else the token is invalid (NaN or 1e300 used to fail while the answer was encoded). Anyone can mint such a token: never use it in production.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from pybroker.security.sasl import SaslAuthenticationError, SaslCredentialError

MECHANISM = "OAUTHBEARER"
SEPARATOR = "\x01"
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{SEPARATOR}"
                           rf"(?P<pairs>(?:{_KEY}={_VALUE}{SEPARATOR})*){SEPARATOR}")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")
LONG_MAX = 2**63 - 1
log = logging.getLogger("pybroker.security")


class InvalidToken(Exception):
    """A token the validator refuses; `scope` is set for a missing required scope (RFC 6750's
    insufficient_scope), and the message is the reason, logged by the broker, never sent."""

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope

    def json(self) -> str:
        """Kafka's error challenge (OAuthBearerSaslServer.jsonErrorResponse, its spacing kept)."""
        text = f'{{"status":"{"insufficient_scope" if self.scope is not None else "invalid_token"}"'
        if self.scope is not None:
            text += f', "scope":"{self.scope}"'
        return text + "}"


@dataclass(frozen=True)
class ValidToken:
    principal: str
    expires_at_ms: int
    scope: frozenset[str] = frozenset()
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)


class TokenValidator(Protocol):
    def validate(self, token: str, now_ms: int) -> ValidToken: ...


@dataclass(frozen=True)
class ClientResponse:
    token: str
    authzid: str = ""
    extensions: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        pairs = "".join(f"{SEPARATOR}{key}={value}" for key, value in self.extensions.items())
        authzid = f"a={self.authzid}" if self.authzid else ""
        return f"n,{authzid},{SEPARATOR}auth=Bearer {self.token}{pairs}{SEPARATOR}{SEPARATOR}".encode()

    @classmethod
    def parse(cls, message: bytes) -> "ClientResponse":
        """SaslCredentialError for a message that is not RFC 7628's initial client response."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise SaslCredentialError("Invalid OAUTHBEARER client first message") from None
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslCredentialError("Invalid OAUTHBEARER client first message")
        pairs = dict(pair.split("=", 1) for pair in match["pairs"].split(SEPARATOR) if pair)
        auth = pairs.pop("auth", None)
        if auth is None:
            raise SaslCredentialError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        bearer = _AUTH.fullmatch(auth)
        if bearer is None:
            raise SaslCredentialError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if bearer["scheme"].lower() != "bearer":
            raise SaslCredentialError(f"Invalid scheme in OAUTHBEARER client first message: {bearer['scheme']}")
        return cls(bearer["token"], match["authzid"] or "", pairs)


class OAuthBearerServer:
    """One exchange on the broker; `clock` gives the wall-clock time in ms (token times are absolute)."""

    mechanism = MECHANISM

    def __init__(self, validator: TokenValidator, clock: Callable[[], int]) -> None:
        self._validator = validator
        self._clock = clock
        self._token: ValidToken | None = None
        self._error: str | None = None

    @property
    def complete(self) -> bool:
        return self._token is not None

    @property
    def authorization_id(self) -> str:
        if self._token is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._token.principal

    @property
    def session_expiry_ms(self) -> int | None:
        return self._token.expires_at_ms if self._token is not None else None

    def evaluate(self, token: bytes) -> bytes:
        if token == SEPARATOR.encode() and self._error is not None:
            raise SaslAuthenticationError(self._error)  # the client's ^A after our error challenge
        self._error = None
        response = ClientResponse.parse(token)
        try:
            valid = self._validator.validate(response.token, self._clock())
        except InvalidToken as exc:
            log.info("OAUTHBEARER token refused: %s", exc)
            self._error = exc.json()
            return self._error.encode()
        if response.authzid and response.authzid != valid.principal:
            raise SaslAuthenticationError(f"Authentication failed: Client requested an authorization id "
                                          f"({response.authzid}) that is different from the token's principal "
                                          f"name ({valid.principal})")
        self._token = valid
        return b""


# Kafka's unsecured validator

def _segment(text: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, UnicodeDecodeError):
        raise InvalidToken("malformed Base64 URL encoded value or JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken("malformed JSON")
    return value


def time_claim(claims: Mapping[str, Any], name: str) -> float | None:
    """A NumericDate claim (``exp``, ``iat``) in seconds, or None when absent; InvalidToken unless it is
    a finite number whose milliseconds fit a long (jose4j's NumericDate refuses the rest), so that no
    session lifetime derived from it overflows its int64 field."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidToken(f"The '{name}' claim was not of type Number: {type(value).__name__}")
    if (isinstance(value, float) and not math.isfinite(value)) or not -LONG_MAX <= value * 1000 <= LONG_MAX:
        raise InvalidToken(f"The '{name}' claim is not a time in range: {value}")
    return value


def token_scope(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    """The scope claim: one string (kept whole, as Kafka does) or a list of strings."""
    value = claims.get(name)
    if isinstance(value, str):
        return frozenset({value.strip()}) if value.strip() else frozenset()
    if isinstance(value, list):
        return frozenset(str(item).strip() for item in value if str(item).strip())
    return frozenset()


@dataclass(frozen=True)
class UnsecuredValidator:
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "UnsecuredValidator":
        """ValueError naming the option for a bad clock skew."""
        skew_text = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip() or "0"
        try:
            skew = int(skew_text)
        except ValueError:
            raise ValueError(f"unsecuredValidatorAllowableClockSkewMs is not a number: {skew_text}") from None
        if skew < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {skew_text}")
        return cls(options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub",
                   options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
                   tuple(options.get("unsecuredValidatorRequiredScope", "").split()), skew)

    def validate(self, token: str, now_ms: int) -> ValidToken:
        if ".." in token:
            raise InvalidToken("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded "
                               "values")
        header, claims = _segment(parts[0]), _segment(parts[1])
        if header.get("alg") != "none":
            raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise InvalidToken("Unsecured JWS must not contain a digital signature")
        expires, issued = time_claim(claims, "exp"), time_claim(claims, "iat")
        if expires is None:
            raise InvalidToken("No expiration time in JWT")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"No principal name in JWT claim: {self.principal_claim}")
        if issued is not None and issued * 1000 > now_ms + self.clock_skew_ms:
            raise InvalidToken(f"The Issued At value ({issued} seconds) was after the indicated time ({now_ms} ms) "
                               f"plus allowable clock skew ({self.clock_skew_ms} ms)")
        if now_ms - self.clock_skew_ms >= expires * 1000:
            raise InvalidToken(f"The indicated time ({now_ms} ms) minus allowable clock skew ({self.clock_skew_ms} "
                               f"ms) was on or after the Expiration Time value ({expires} seconds)")
        if issued is not None and expires <= issued:
            raise InvalidToken(f"The Expiration Time time ({expires} seconds) was not after the Issued At time "
                               f"({issued} seconds)")
        scope = token_scope(claims, self.scope_claim)
        missing = [item for item in self.required_scope if item not in scope]
        if missing:
            raise InvalidToken(f"The provided scope ({sorted(scope)}) was missing a required scope ({missing[0]})",
                               scope=f"[{', '.join(self.required_scope)}]")
        return ValidToken(principal, round(expires * 1000), scope, claims)


def unsecured_token(principal: str, lifetime_s: int, now_s: float, **claims: Any) -> str:
    """An unsecured JWS as librdkafka's ``enable.sasl.oauthbearer.unsecure.jwt`` makes it (tests, tools)."""
    def segment(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    body = {"sub": principal, "iat": int(now_s), "exp": int(now_s) + lifetime_s, **claims}
    return f"{segment({'alg': 'none'})}.{segment(body)}."
