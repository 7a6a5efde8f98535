"""Steps that finish once started, whoever stops waiting for them.

A step that writes a file and then changes state in memory (a store's JSON file, a new log and its replica)
must not stop half-way when the request that asked for it is cancelled (its client or the controller's
connection went away): the file would then hold what memory does not, or a lock would be released while a
thread still writes. Such a step runs as a task of its own; the caller waits through a shield, and the task is
kept referenced until it ends (the event loop keeps only weak references to tasks)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Coroutine, ParamSpec, TypeVar

__all__ = ["finishes_once_started", "run_to_end"]

P = ParamSpec("P")
T = TypeVar("T")
_RUNNING: set[asyncio.Future[Any]] = set()


def run_to_end(step: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """``step`` in a task of its own; the returned future is its outcome, and cancelling it leaves the step running."""
    task = asyncio.ensure_future(step)
    _RUNNING.add(task)
    task.add_done_callback(_ended)
    return asyncio.shield(task)


def finishes_once_started(step: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """``step`` (a coroutine function) run with `run_to_end` at every call."""
    @functools.wraps(step)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return await run_to_end(step(*args, **kwargs))
    return run


def _ended(task: asyncio.Future[Any]) -> None:
    _RUNNING.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a caller that stopped waiting was answered already
