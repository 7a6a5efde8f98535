"""Controller-bound admin calls retried while the controller moves, and only then."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar, cast

import pytest

from pybroker.admin.retry import call_with_retries, raise_controller_moved
from pybroker.client import KafkaClient, KafkaConnectionError, KafkaTimeoutError, ResponseError
from pybroker.protocol.error_codes import ErrorCode

T = TypeVar("T")


class FakeClient:
    """What the retry needs of a KafkaClient: its timeout, and dropping connections and re-reading Metadata."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.refreshes = 0

    async def close(self) -> None:
        """A fake has no connections to close."""

    async def metadata(self, topics: list[str]) -> None:
        self.refreshes += 1


def retried(client: FakeClient, call: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(call_with_retries(cast(KafkaClient, client), "electLeaders", call))


def failing(*errors: Exception) -> Callable[[], Awaitable[str]]:
    """A call that raises ``errors`` one per attempt, then answers "done"."""
    remaining = list(errors)

    async def call() -> str:
        if remaining:
            raise remaining.pop(0)
        return "done"

    return call


def test_not_controller_and_a_broken_connection_are_retried_after_a_metadata_refresh() -> None:
    client = FakeClient(timeout=30)
    call = failing(ResponseError(ErrorCode.NOT_CONTROLLER), KafkaConnectionError("Connection to 127.0.0.1:1 lost"))
    assert retried(client, call) == "done"
    assert client.refreshes == 2


def test_an_answer_to_the_request_itself_is_not_retried() -> None:
    client = FakeClient(timeout=30)
    with pytest.raises(ResponseError) as raised:
        retried(client, failing(ResponseError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
    assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert client.refreshes == 0


def test_the_call_fails_with_a_timeout_naming_the_attempts_once_the_deadline_passes() -> None:
    client = FakeClient(timeout=0.3)

    async def never_the_controller() -> str:
        raise ResponseError(ErrorCode.NOT_CONTROLLER)

    with pytest.raises(KafkaTimeoutError) as raised:
        retried(client, never_the_controller)
    attempts = client.refreshes + 1
    assert attempts >= 2
    assert str(raised.value) == (f"Call(callName=electLeaders) timed out after {attempts} attempt(s): "
                                 "ResponseError: This is not the correct controller for this cluster.")


def test_a_per_topic_not_controller_is_raised_to_retry_the_whole_call() -> None:
    with pytest.raises(ResponseError) as raised:
        raise_controller_moved([None, ResponseError(ErrorCode.TOPIC_ALREADY_EXISTS),
                                ResponseError(ErrorCode.NOT_CONTROLLER)])
    assert raised.value.code == ErrorCode.NOT_CONTROLLER
    raise_controller_moved([None, ResponseError(ErrorCode.TOPIC_ALREADY_EXISTS)])
