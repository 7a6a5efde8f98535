"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them.

Messages (Kafka's ScramMessages):

    client-first  n,[a=<authzid>],n=<saslname>,r=<client nonce>[,<ext>=<value>...]
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header>,r=<nonce>,p=<base64 proof>
    server-final  v=<base64 server signature>

A stored credential is what Kafka keeps per user and mechanism, never the password:
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (ScramCredentialUtils), where
SaltedPassword = PBKDF2-HMAC(password, salt, iterations), StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key").

Two choices differ from Kafka's ScramSaslServer, both so that an unauthenticated client learns
nothing about which users exist: an unknown user gets a server-first message built from a
deterministic fake credential (RFC 5802 section 9) with the salt length and iteration count of a user
created with the defaults (``DEFAULT_SALT_BYTES``, ``DEFAULT_ITERATIONS``), and fails only at the
proof, like a wrong password (the seed is per broker run: two brokers, or one before and after a
restart, answer an unknown user with different salts, where a real user's salt is the same); and Kafka's ``tokenauth`` extension (delegation tokens, which pybroker does not have)
fails the same way.

The client-final nonce must end with the server-first nonce (Kafka 3.8.1's check after
CVE-2024-56128) rather than equal it (RFC 5802, Kafka 4): librdkafka before 2.6.1, the one in many
distributions' kcat, sends the client nonce twice; the proof still covers the message as sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Callable

from pybroker.security.sasl import SaslAuthenticationError, SaslCredentialError, SaslError


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    type_code: int  # Kafka's org.apache.kafka.clients.admin.ScramMechanism.type
    min_iterations: int = 4096

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE: dict[int, ScramMechanism] = {m.type_code: m for m in MECHANISMS.values()}
MAX_ITERATIONS = 16384  # Kafka's limit for AlterUserScramCredentials
DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default
DEFAULT_SALT_BYTES = 32  # pybroker's admin client's salts
TOKEN_AUTH_EXTENSION = "tokenauth"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: ScramMechanism, salt: bytes, salted_password: bytes,
                             iterations: int) -> "ScramCredential":
        client_key = mechanism.hmac(salted_password, b"Client Key")
        return cls(salt, mechanism.digest(client_key), mechanism.hmac(salted_password, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, mechanism: ScramMechanism, password: str, iterations: int,
                      salt: bytes | None = None) -> "ScramCredential":
        salt = salt if salt is not None else secrets.token_bytes(DEFAULT_SALT_BYTES)
        return cls.from_salted_password(mechanism, salt, mechanism.salted_password(password, salt, iterations),
                                        iterations)

    def to_text(self) -> str:
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        """Kafka's stored form; ValueError when a field is missing or malformed."""
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(_unb64(fields["salt"]), _unb64(fields["stored_key"]), _unb64(fields["server_key"]),
                       int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"Invalid SCRAM credential: {exc}") from None


# Message grammar (Kafka's ScramMessages patterns)
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_VALUE = r"[\x01-\x2B\x2D-\x7F]+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?:m={_VALUE},)?"
                           rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
                           rf"(?P<extensions>{_EXTENSIONS}))")
_CLIENT_FINAL = re.compile(rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE})"
                           rf"{_EXTENSIONS}),p=(?P<proof>{_BASE64})")
_SERVER_FIRST = re.compile(rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),"
                           rf"i=(?P<iterations>[0-9]+){_EXTENSIONS}")
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>{_VALUE})|v=(?P<signature>{_BASE64})){_EXTENSIONS}")


def username_of(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname_of(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def _decode(token: bytes, what: str) -> str:
    try:
        return token.decode()
    except UnicodeDecodeError:
        raise SaslCredentialError(f"Invalid SCRAM {what} message: not UTF-8") from None


class ScramServer:
    """One SCRAM exchange on the broker. `credential_of` looks a user's stored credential up;
    `secret` seeds the fake credentials of unknown users (stable per broker run)."""

    session_expiry_ms = None

    def __init__(self, mechanism: ScramMechanism, credential_of: Callable[[str], ScramCredential | None],
                 secret: bytes) -> None:
        self.mechanism = mechanism.name
        self._scram = mechanism
        self._credential_of = credential_of
        self._secret = secret
        self._state = "client-first"
        self._user = ""
        self._known = False
        self._credential: ScramCredential | None = None
        self._gs2 = self._client_first_bare = self._server_first = self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        if not self.complete:
            raise RuntimeError("Authentication exchange has not completed")
        return self._user

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "client-first":
                return self._client_first(_decode(token, "client first"))
            if self._state == "client-final":
                return self._client_final(_decode(token, "client final"))
            raise SaslCredentialError(f"Unexpected challenge in SASL server state {self._state}")
        except SaslError:
            self._state = "failed"
            self._credential = None
            raise

    def _client_first(self, message: str) -> bytes:
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            raise SaslCredentialError(f"Invalid SCRAM client first message format: {message}")
        self._user = username_of(match["saslname"])
        authzid = match["authzid"]
        if authzid and username_of(authzid) != self._user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        extensions = dict(item.split("=", 1) for item in match["extensions"].split(",") if item)
        credential = self._credential_of(self._user)
        self._known = credential is not None and extensions.get(TOKEN_AUTH_EXTENSION, "false") != "true"
        if credential is None or not self._known:
            credential = self._fake_credential()
        elif credential.iterations < self._scram.min_iterations:
            raise SaslCredentialError(f"Iterations {credential.iterations} is less than the minimum "
                                      f"{self._scram.min_iterations} for {self.mechanism}")
        self._credential = credential
        self._gs2, self._client_first_bare = match["gs2"], match["bare"]
        self._nonce = match["nonce"] + secrets.token_urlsafe(24)
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = "client-final"
        return self._server_first.encode()

    def _fake_credential(self) -> ScramCredential:
        """What an unknown user is answered with: the salt length and iteration count of a user created
        with the defaults, the salt derived from the name, so that asking again gets the same."""
        seed = self._scram.hmac(self._secret, f"{self.mechanism}\x00{self._user}".encode())
        salt = hashlib.shake_256(seed).digest(DEFAULT_SALT_BYTES)
        return ScramCredential(salt, self._scram.digest(seed + b"stored"), self._scram.digest(seed + b"server"),
                               DEFAULT_ITERATIONS)

    def _client_final(self, message: str) -> bytes:
        match = _CLIENT_FINAL.fullmatch(message)
        if match is None:
            raise SaslCredentialError("Invalid SCRAM client final message format")
        if not match["nonce"].endswith(self._nonce):
            raise SaslCredentialError("Invalid client nonce in the final client message.")
        if _unb64(match["channel"]) != self._gs2.encode():
            raise SaslCredentialError("Invalid channel binding in the final client message.")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{match['without_proof']}".encode()
        signature = self._scram.hmac(credential.stored_key, auth_message)
        proof = _unb64(match["proof"])
        if len(proof) != len(signature):
            raise SaslCredentialError("Invalid client credentials")
        computed = self._scram.digest(_xor(signature, proof))
        if not hmac.compare_digest(computed, credential.stored_key) or not self._known:
            raise SaslCredentialError("Invalid client credentials")
        self._state = "complete"
        self._credential = None
        return f"v={_b64(self._scram.hmac(credential.server_key, auth_message))}".encode()


class ScramClient:
    """The client side of one exchange (our client and the tests): first(), answer(), verify()."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, nonce: str | None = None) -> None:
        self._scram = mechanism
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={saslname_of(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def answer(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        match = _SERVER_FIRST.fullmatch(text)
        if match is None or not match["nonce"].startswith(self._nonce):
            raise SaslAuthenticationError(f"Invalid SCRAM server first message: {text}")
        iterations = int(match["iterations"])
        if iterations < self._scram.min_iterations:
            raise SaslAuthenticationError(f"Requested iterations {iterations} is less than the minimum "
                                          f"{self._scram.min_iterations} for {self._scram.name}")
        salted = self._scram.salted_password(self._password, _unb64(match["salt"]), iterations)
        without_proof = f"c={_b64(b'n,,')},r={match['nonce']}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = self._scram.hmac(salted, b"Client Key")
        signature = self._scram.hmac(self._scram.digest(client_key), auth_message)
        self._server_signature = self._scram.hmac(self._scram.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(_xor(client_key, signature))}".encode()

    def verify(self, server_final: bytes) -> None:
        match = _SERVER_FINAL.fullmatch(server_final.decode(errors="replace"))
        if match is None or match["error"] is not None:
            raise SaslAuthenticationError(f"Sasl authentication using {self._scram.name} failed with error: "
                                          f"{match['error'] if match else 'invalid server final message'}")
        if not hmac.compare_digest(_unb64(match["signature"]), self._server_signature):
            raise SaslAuthenticationError("Invalid server signature in server final message")
