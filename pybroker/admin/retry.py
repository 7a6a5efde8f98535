"""Retrying a controller-bound admin call while the controller moves, as Kafka's AdminClient does.

Leader elections, reassignments and topic changes go to the controller named by Metadata. When that
broker stops (or resigns) between Metadata and the request, the answer is NOT_CONTROLLER or a broken
connection. Kafka's AdminClient retries such calls with backoff (`retry.backoff.ms` 100, doubling to
`retry.backoff.max.ms` 1000) until the call's deadline, then fails it with a TimeoutException naming
the attempts; the tools print that one line and exit 1. Errors that are the answer to the request
itself (an unknown topic, an election not needed) are never retried.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Iterable, TypeVar

from pybroker.client import KafkaClient, KafkaConnectionError, KafkaTimeoutError, ResponseError
from pybroker.protocol.error_codes import ErrorCode

T = TypeVar("T")

INITIAL_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
#: Answers that mean "ask the cluster again", not "this request is wrong".
CONTROLLER_MOVED = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.NETWORK_EXCEPTION})


async def call_with_retries(client: KafkaClient, name: str, call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, repeated after each controller move until the client's timeout (the tool's
    --command-timeout, Kafka's default.api.timeout.ms) has passed; ``name`` is Kafka's call name.

    Before a retry the client drops its connections and re-reads Metadata, so the next attempt goes to
    the broker that is controller now (and not over a connection to one that has gone)."""
    deadline = time.monotonic() + client.timeout
    backoff = INITIAL_BACKOFF_S
    attempts = 0
    while True:
        attempts += 1
        try:
            if attempts > 1:
                await client.close()
                await client.metadata([])
            return await call()
        except (ResponseError, KafkaConnectionError) as exc:
            if isinstance(exc, ResponseError) and exc.code not in CONTROLLER_MOVED:
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"Call(callName={name}) timed out after {attempts} attempt(s): "
                                        f"{type(exc).__name__}: {exc}") from None
            await asyncio.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, MAX_BACKOFF_S)


def raise_controller_moved(errors: Iterable[ResponseError | None]) -> None:
    """Raise the first per-item error that means the controller moved, so the call is retried whole."""
    for error in errors:
        if error is not None and error.code in CONTROLLER_MOVED:
            raise error
