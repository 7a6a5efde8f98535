"""HTTP basic authentication against the broker's own users, and authorization by Kafka ACLs.

A request's ``Authorization: Basic`` credentials must be those of a SCRAM user (checked against the
stored SCRAM credential, as a SCRAM login would) or of a PLAIN user of a broker listener. With an
authorizer configured, the registry's operations are Kafka operations on the registry's topic, so
``pybroker acls`` grants them: reading needs Describe, registering and deleting schemas Write, and
changing configs and modes AlterConfigs on topic ``_schemas`` (super users may do everything).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import time
from typing import Callable, Mapping

from pybroker.schema_registry import errors
from pybroker.schema_registry.http import Request
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.security.authorizer import Authorizer
from pybroker.security.principal import KafkaPrincipal
from pybroker.security.sasl.scram import MECHANISMS, ScramCredential

CACHE_TTL_S = 60.0
CACHE_LIMIT = 10000
OPERATIONS = {"read": AclOperation.DESCRIBE, "write": AclOperation.WRITE, "config": AclOperation.ALTER_CONFIGS}


def unauthorized(message: str = "Unauthorized") -> errors.RegistryError:
    return errors.RegistryError(401, 401, message)


class BasicAuthenticator:
    def __init__(self, plain_users: Callable[[], Mapping[str, str]],
                 scram_credentials: Callable[[str], Mapping[str, str]]) -> None:
        self.plain_users = plain_users
        self.scram_credentials = scram_credentials
        self._verified: dict[bytes, float] = {}  # digest of user:password -> until when it stays verified

    async def __call__(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            raise unauthorized("Missing or unsupported Authorization header: use HTTP basic authentication")
        try:
            user, sep, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise unauthorized("Malformed basic credentials") from None
        if not sep or not user:
            raise unauthorized("Malformed basic credentials")
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        now = time.monotonic()
        if self._verified.get(key, 0.0) > now:
            request.user = user
            return
        if not await self._check(user, password):
            raise unauthorized("Authentication failed for user " + user)
        if len(self._verified) >= CACHE_LIMIT:
            self._verified.clear()
        self._verified[key] = now + CACHE_TTL_S
        request.user = user

    async def _check(self, user: str, password: str) -> bool:
        expected = self.plain_users().get(user)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            return True
        for mechanism_name, text in self.scram_credentials(user).items():
            mechanism = MECHANISMS.get(mechanism_name)
            if mechanism is None:
                continue
            try:
                stored = ScramCredential.from_text(text)
            except ValueError:
                continue
            computed = await asyncio.to_thread(ScramCredential.from_password, mechanism, password, stored.iterations,
                                               stored.salt)  # PBKDF2: thousands of rounds, off the loop
            if hmac.compare_digest(computed.stored_key, stored.stored_key):
                return True
        return False


class AclAuthorization:
    def __init__(self, authorizer: Authorizer, topic: str) -> None:
        self.authorizer = authorizer
        self.topic = topic

    def __call__(self, request: Request, operation: str) -> None:
        principal = KafkaPrincipal("User", request.user or "ANONYMOUS")
        host = request.peer.rsplit(":", 1)[0]
        wanted = OPERATIONS[operation]
        if not self.authorizer.authorize(principal, host, wanted, ResourceType.TOPIC, self.topic):
            raise errors.RegistryError(403, 40301, f"User {principal} is not authorized to "
                                                   f"{wanted.name.replace('_', ' ').title()} topic {self.topic}")
