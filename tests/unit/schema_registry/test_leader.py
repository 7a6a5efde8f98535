"""Finding the registry leader and forwarding to it: no leader within the timeout is 50004, a leader
that cannot be reached 50003, and a forwarded write comes back with the leader's answer and offset."""

from __future__ import annotations

import asyncio
import socket

import pytest

from pybroker.schema_registry import errors
from pybroker.schema_registry.http import HttpServer, Request, Response
from pybroker.schema_registry.leader import FORWARDED_HEADER, OFFSET_HEADER, PartitionLeadership, forward


async def no_topic() -> None:
    raise AssertionError("the topic exists")


async def url_of(broker_id: int) -> str | None:
    return {2: "http://127.0.0.1:1"}.get(broker_id)


def leadership(leader: int | None) -> PartitionLeadership:
    return PartitionLeadership(0, lambda: leader, url_of, no_topic, timeout_s=0.3)


def test_the_leader_is_found_by_partition_leadership() -> None:
    assert asyncio.run(leadership(0).leader_url()) is None  # this broker writes itself
    assert asyncio.run(leadership(2).leader_url()) == "http://127.0.0.1:1"


@pytest.mark.parametrize("leader", [None, 5])  # no leader; a leader whose registry published no URL
def test_no_leader_within_the_timeout_is_50004(leader: int | None) -> None:
    with pytest.raises(errors.RegistryError) as refused:
        asyncio.run(leadership(leader).leader_url())
    assert refused.value.error_code == errors.UNKNOWN_LEADER


def test_a_missing_topic_is_created_before_asking_again() -> None:
    state = {"topic": False}

    async def create() -> None:
        state["topic"] = 0

    found = PartitionLeadership(0, lambda: state["topic"], url_of, create, timeout_s=1)
    assert asyncio.run(found.leader_url()) is None


def test_forwarding_to_a_gone_leader_is_50003() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nobody listens there
    request = Request("POST", "/subjects/s/versions", {}, {"content-type": "application/json"}, b"{}")
    with pytest.raises(errors.RegistryError) as refused:
        asyncio.run(forward(f"http://127.0.0.1:{port}", request, timeout_s=2))
    assert refused.value.error_code == errors.REQUEST_FORWARDING_FAILED


def test_a_forwarded_request_carries_its_credentials_and_returns_the_offset() -> None:
    seen: list[Request] = []

    async def leader(request: Request) -> Response:
        seen.append(request)
        return Response(200, b'{"id":7}', headers=[(OFFSET_HEADER, "41")])

    async def scenario() -> Response:
        server = HttpServer(leader, max_body_bytes=1000)
        port = await server.start("127.0.0.1", 0)
        try:
            request = Request("POST", "/subjects/a%2Fb/versions", {"normalize": ["true"]},
                              {"authorization": "Basic YTpi", "content-type": "application/json"}, b'{"schema":"x"}')
            return await forward(f"http://127.0.0.1:{port}", request, timeout_s=5)
        finally:
            await server.close()

    answer = asyncio.run(scenario())
    assert (answer.status, answer.body, answer.headers) == (200, b'{"id":7}', [(OFFSET_HEADER, "41")])
    (received,) = seen
    assert received.path == "/subjects/a%2Fb/versions" and received.query == {"normalize": ["true"]}
    assert received.headers["authorization"] == "Basic YTpi" and FORWARDED_HEADER in received.headers
    assert received.body == b'{"schema":"x"}'
