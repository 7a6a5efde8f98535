"""What a handler gets besides its request: the broker's services and who is asking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.server.broker import Broker


@dataclass(slots=True)
class RequestContext:
    broker: "Broker"
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    now_ms: int
