"""Handler registry: each API module declares its key, version range and coroutine next to each other.

ApiVersions is answered from this registry, so what the broker advertises and what it handles
cannot disagree (redpanda's handlers.h / api_versions.cc idea).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine

from pybroker.protocol import messages
from pybroker.server.quota.enforcement import enforced

if TYPE_CHECKING:
    from pybroker.protocol.schema import Message
    from pybroker.server.context import RequestContext

HandlerFunc = Callable[["RequestContext", Any], Coroutine[Any, Any, Any]]
ImmediateFunc = Callable[["RequestContext", Any], Any]
"""A handler's first step as a plain function: its answer, or, when it must wait, a coroutine for the rest."""
# Filled per API on its first request: messages.REQUEST_CLASSES would load all ~100 message modules at start-up.
_REQUEST_CLASSES: dict[int, type[Message]] = {}


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    #: the handler under the client quotas (what requests go through while any quota is set)
    handle: HandlerFunc
    #: the handler itself, which the dispatcher calls directly while no quota is set at all
    unbounded: HandlerFunc
    #: the handler's first step as a plain function, if it has one (`ImmediateFunc`): while no quota is set and
    #: no metrics are kept, the dispatcher calls it in the read callback, with no coroutine for a request that
    #: does not wait
    immediate: ImmediateFunc | None = None

    @property
    def request_class(self) -> type[Message]:
        found = _REQUEST_CLASSES.get(self.api_key)
        if found is None:
            found = _REQUEST_CLASSES[self.api_key] = getattr(messages, f"{messages.API_NAMES[self.api_key]}Request")
        return found


def api(api_key: int, min_version: int, max_version: int,
        immediate: ImmediateFunc | None = None) -> Callable[[HandlerFunc], ApiHandler]:
    """Declare a handler together with the versions it serves; it runs under the client quotas. ``immediate``:
    the same handler's first step as a plain function (the coroutine awaits what it returns, if it waits)."""

    def wrap(func: HandlerFunc) -> ApiHandler:
        return ApiHandler(api_key, min_version, max_version, enforced(api_key, func), func, immediate)

    return wrap
