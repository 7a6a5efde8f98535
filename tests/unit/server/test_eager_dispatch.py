"""A connection runs each request's first step at once (`KafkaConnection._dispatch`): requests that
finish without waiting are answered from the read callback, without a task; requests that wait go on in
a task; either way responses keep request order, and a waiting handler is cancelled with its connection."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import uvloop

from pybroker.server.network import KafkaConnection
from tests.eventually import eventually_async

SYNC, WAIT, FOREVER, FAIL = 0, 1, 2, 3


class _Dispatcher:
    """Answers frame ``[kind, tag]``: SYNC at once, WAIT after ``release`` is set, FOREVER never, FAIL by raising."""

    io = None

    def __init__(self) -> None:
        self.release = asyncio.get_running_loop().create_future()
        self.in_task: dict[int, bool] = {}
        self.cancelled: list[int] = []

    async def dispatch(self, frame: memoryview, peer: str) -> bytes:
        kind, tag = frame[0], frame[1]
        self.in_task[tag] = asyncio.current_task() is not None
        if kind == WAIT:
            await self.release
        elif kind == FOREVER:
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                self.cancelled.append(tag)
                raise
        elif kind == FAIL:
            raise RuntimeError("handler failed")
        return struct.pack(">iB", 1, tag)


Scenario = Callable[[_Dispatcher, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _run(scenario: Scenario) -> None:
    """Run ``scenario`` against a KafkaConnection on a loopback port, with one client connected."""
    async def served() -> None:
        dispatcher = _Dispatcher()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: KafkaConnection(dispatcher, max_frame_size=64, max_in_flight=16,
                                                                  connections=set()), "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        try:
            await scenario(dispatcher, reader, writer)
        finally:
            writer.close()
            server.close()

    uvloop.run(served())


def _frames(*requests: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">iBB", 2, kind, tag) for kind, tag in requests)


async def _answers(reader: asyncio.StreamReader, count: int) -> list[int]:
    data = await asyncio.wait_for(reader.readexactly(5 * count), 10)
    return [data[i * 5 + 4] for i in range(count)]


def test_a_request_that_does_not_wait_is_answered_without_a_task() -> None:
    async def scenario(dispatcher: _Dispatcher, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_frames((SYNC, 7), (SYNC, 8)))
        assert await _answers(reader, 2) == [7, 8]
        assert dispatcher.in_task == {7: False, 8: False}

    _run(scenario)


def test_answers_keep_request_order_when_an_earlier_request_waits() -> None:
    async def scenario(dispatcher: _Dispatcher, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_frames((WAIT, 1), (SYNC, 2), (SYNC, 3)))
        await eventually_async(lambda: len(dispatcher.in_task) == 3, "2 and 3 done", timeout=10, interval=0.001)
        dispatcher.release.set_result(None)
        assert await _answers(reader, 3) == [1, 2, 3]
        assert dispatcher.in_task == {1: False, 2: False, 3: False}  # every first step ran in the read callback

    _run(scenario)


def test_a_waiting_handler_is_cancelled_when_its_connection_closes() -> None:
    async def scenario(dispatcher: _Dispatcher, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_frames((FOREVER, 5)))
        await eventually_async(lambda: 5 in dispatcher.in_task, "5 in a task", timeout=10, interval=0.001)
        writer.close()
        await eventually_async(lambda: dispatcher.cancelled == [5], "5 cancelled", timeout=10, interval=0.001)

    _run(scenario)


def test_a_handler_failing_in_its_first_step_closes_the_connection_after_earlier_answers() -> None:
    async def scenario(dispatcher: _Dispatcher, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_frames((SYNC, 1), (FAIL, 2), (SYNC, 3)))
        assert await _answers(reader, 1) == [1]
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing after the failure

    _run(scenario)
