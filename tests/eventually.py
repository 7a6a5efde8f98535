"""The one way a test waits for the system under test: poll a condition until it holds or a deadline
passes, then fail naming what was awaited. A wait is only ever for a condition, never for time itself."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0

Description = str | Callable[[], str]


def _timed_out(what: Description, timeout: float) -> AssertionError:
    return AssertionError(f"timed out after {timeout:.0f}s waiting for {what() if callable(what) else what}")


def eventually(predicate: Callable[[], T], what: Description, timeout: float = DEFAULT_TIMEOUT_S,
               interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy, which is returned; fail after ``timeout``
    seconds. ``what`` (or what it returns, computed at the failure) names what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout)
        time.sleep(interval)


async def eventually_async(predicate: Callable[[], T | Awaitable[T]], what: Description,
                           timeout: float = DEFAULT_TIMEOUT_S, interval: float = 0.05) -> T:
    """As :func:`eventually`, inside an event loop: ``predicate`` may be a coroutine function, and the
    pauses between polls let the loop's other tasks (the clients under test) run."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout)
        await asyncio.sleep(interval)
