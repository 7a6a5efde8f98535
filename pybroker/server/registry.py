"""Handler registry: each API module declares its key, version range and coroutine next to each other.

ApiVersions is answered from this registry, so what the broker advertises and what it handles
cannot disagree (redpanda's handlers.h / api_versions.cc idea).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from pybroker.protocol.messages import REQUEST_CLASSES
from pybroker.server.quota.enforcement import enforced

if TYPE_CHECKING:
    from pybroker.protocol.schema import Message
    from pybroker.server.context import RequestContext

HandlerFunc = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handle: HandlerFunc

    @property
    def request_class(self) -> type[Message]:
        return REQUEST_CLASSES[self.api_key]


def api(api_key: int, min_version: int, max_version: int) -> Callable[[HandlerFunc], ApiHandler]:
    """Declare a handler together with the versions it serves; it runs under the client quotas."""

    def wrap(func: HandlerFunc) -> ApiHandler:
        return ApiHandler(api_key, min_version, max_version, enforced(api_key, func))

    return wrap
