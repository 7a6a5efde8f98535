"""The registry's HTTP server under hostile clients: a request trickling in past its deadline gets 408
and the connection closes, idle keep-alive connections close, pipelined requests are answered in order,
connections past the limit are closed at once, and a handler's crash is a 500, not a dead server."""

from __future__ import annotations

import asyncio

from pybroker.schema_registry.http import HttpServer, Request, Response


async def echo(request: Request) -> Response:
    if request.path == "/crash":
        raise RuntimeError("boom")
    return Response(200, f"{request.method} {request.path} {len(request.body)}".encode())


async def with_server(scenario, **limits) -> None:  # type: ignore[no-untyped-def]
    server = HttpServer(echo, max_body_bytes=limits.pop("max_body_bytes", 1000), **limits)
    port = await server.start("127.0.0.1", 0)
    try:
        await asyncio.wait_for(scenario(port), 10)
    finally:
        await server.close()


async def read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), 5)


def test_a_request_past_its_deadline_gets_408() -> None:
    async def scenario(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /subjects HTTP/1.1\r\nHost: x\r\n")  # never finished
        await writer.drain()
        assert (await read_all(reader)).startswith(b"HTTP/1.1 408 ")

    asyncio.run(with_server(scenario, request_timeout_s=0.3))


def test_idle_connections_close_and_pipelined_requests_are_answered_in_order() -> None:
    async def scenario(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        await writer.drain()
        answer = await read_all(reader)  # both answers, then the idle timeout closes the connection
        assert answer.index(b"GET /a 0") < answer.index(b"POST /b 3")

    asyncio.run(with_server(scenario, idle_timeout_s=0.3))


def test_connections_past_the_limit_are_closed() -> None:
    async def scenario(port: int) -> None:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        for held_reader, held_writer in held:  # an answer on each: the server holds both connections
            held_writer.write(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
            await asyncio.wait_for(held_reader.readuntil(b"GET /held 0"), 5)
        reader, _ = await asyncio.open_connection("127.0.0.1", port)
        assert await read_all(reader) == b""
        _, writer = held[0]
        writer.close()

    asyncio.run(with_server(scenario, max_connections=2, idle_timeout_s=5))


def test_a_crashing_handler_answers_500_and_the_server_goes_on() -> None:
    async def scenario(port: int) -> None:
        for path, status in ((b"/crash", b"500"), (b"/fine", b"200")):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await writer.drain()
            assert (await read_all(reader)).startswith(b"HTTP/1.1 " + status)

    asyncio.run(with_server(scenario))


def test_an_oversized_chunked_body_is_413() -> None:
    async def scenario(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(5):
            writer.write(b"190\r\n" + b"a" * 400 + b"\r\n")
        await writer.drain()
        assert (await read_all(reader)).startswith(b"HTTP/1.1 413 ")

    asyncio.run(with_server(scenario, max_body_bytes=1000))
