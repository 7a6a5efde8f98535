"""What a handler gets besides its request: the broker's services and who is asking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pybroker.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from pybroker.server.broker import Broker


@dataclass(slots=True)
class ConnectionSession:
    """One connection's identity, shared by all its requests: the listener it came in on (answers
    advertise that listener's endpoints, as Kafka's do) and the principal it authenticated as
    (for the authorizer; ANONYMOUS until TLS or SASL names it)."""

    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    principal: KafkaPrincipal = ANONYMOUS


@dataclass(slots=True)
class RequestContext:
    broker: "Broker"
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    now_ms: int
    session: ConnectionSession = field(default_factory=ConnectionSession)

    @property
    def listener(self) -> str:
        return self.session.listener
