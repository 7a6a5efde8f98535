"""What a handler gets besides its request: the broker's services (`services.Services`) and who is asking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pybroker.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from pybroker.server.services import Services
    from pybroker.server.sasl_session import SaslSession


@dataclass(slots=True)
class ConnectionSession:
    """One connection's identity, shared by all its requests: the listener it came in on (answers
    advertise that listener's endpoints, as Kafka's do) and the principal it authenticated as
    (for the authorizer; ANONYMOUS until TLS or SASL names it)."""

    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    principal: KafkaPrincipal = ANONYMOUS
    sasl: "SaslSession | None" = None  # on SASL_PLAINTEXT and SASL_SSL listeners
    close_after_response: bool = False  # a handler refused the client: close once its answer is out
    client_software_name: str = ""  # from ApiVersions v3+, for client-metrics subscriptions to match
    client_software_version: str = ""


@dataclass(slots=True)
class RequestContext:
    services: "Services"
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    now_ms: int
    session: ConnectionSession = field(default_factory=ConnectionSession)
    request_size: int = 0  # the request's bytes after the size prefix (Kafka's request.sizeInBytes)

    @property
    def listener(self) -> str:
        return self.session.listener
