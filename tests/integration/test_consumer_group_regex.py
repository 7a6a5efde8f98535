"""KIP-848 topic regexes: evaluated with RE2 (linear time, Kafka's RE2/J syntax), off the request
path, cached per group; a regex RE2 cannot run is INVALID_REGULAR_EXPRESSION.

The hostile regex ``.{10}(.*)*Q`` takes Python's backtracking ``re`` minutes per 40-character topic
name: evaluated on the event loop it froze the whole broker. Here a bystander's request, sent while
that regex is resolved, must be answered. The bound on that wait only tells a frozen broker from a
working one (the freeze it detects lasts hours), it measures nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Iterator

import pytest

from pybroker.client.connection import Connection
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    MetadataRequest,
    MetadataResponse,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic

HOSTILE = r".{10}(.*)*Q"
FROZEN_S = 30.0
"""A broker that has not answered a metadata request in this long is frozen (the freeze lasts hours)."""
HEARTBEAT_VERSION = 1  # the first version with SubscribedTopicRegex


@pytest.fixture(scope="module")
def regex_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("regex"), {"offsets.topic.num.partitions": "1"}).start()
    yield process
    process.kill()


def join(group: str, **fields: object) -> ConsumerGroupHeartbeatRequest:
    request = ConsumerGroupHeartbeatRequest(group_id=group, member_id=str(uuid.uuid4()), member_epoch=0,
                                            rebalance_timeout_ms=30000, topic_partitions=[])
    for name, value in fields.items():
        setattr(request, name, value)
    return request


async def heartbeat(connection: Connection, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    """One heartbeat, again while the group's coordinator is still loading (the broker just started)."""
    for _ in range(100):
        answer = await connection.send_at(request, HEARTBEAT_VERSION, ConsumerGroupHeartbeatResponse)
        if answer.error_code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR):
            return answer
        await asyncio.sleep(0.1)
    raise AssertionError(f"the coordinator of {request.group_id} never loaded")


async def assigned_topic_ids(connection: Connection, request: ConsumerGroupHeartbeatRequest,
                             beats: int = 200) -> set[uuid.UUID]:
    """Heartbeat as a member that owns what it is given until it is given the same non-empty
    assignment twice (the regex resolved); the topic ids it holds."""
    owned: dict[uuid.UUID, list[int]] = {}
    for _ in range(beats):
        answer = await heartbeat(connection, request)
        assert answer.error_code == ErrorCode.NONE, answer
        request.member_epoch = answer.member_epoch
        request.rebalance_timeout_ms, request.subscribed_topic_names, request.subscribed_topic_regex = -1, None, None
        given = owned if answer.assignment is None else \
            {tp.topic_id: sorted(tp.partitions) for tp in answer.assignment.topic_partitions}
        if given and given == owned:
            return set(owned)
        owned = given
        request.topic_partitions = [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=p)
                                    for t, p in owned.items()]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no stable assignment after {beats} heartbeats: {owned}")


def test_a_backtracking_regex_does_not_freeze_the_broker(regex_broker: BrokerProcess) -> None:
    long_names = [f"bystanders-topic-{i}-" + "x" * 22 for i in range(3)]  # 40 characters each
    for name in [*long_names, "victim-a"]:
        create_topic(regex_broker.bootstrap, name, 2)
    port = regex_broker.port
    assert port is not None

    async def scenario() -> None:
        hostile = await Connection.open("127.0.0.1", port, timeout=FROZEN_S * 4)
        bystander = await Connection.open("127.0.0.1", port, timeout=FROZEN_S * 4)
        member = await Connection.open("127.0.0.1", port, timeout=FROZEN_S * 4)
        try:
            await heartbeat(member, join("warm-up", subscribed_topic_names=[]))  # the coordinator is loaded
            for _ in range(2):  # the joining heartbeat, then one that finds the regex resolved
                request = join("hostile", subscribed_topic_regex=HOSTILE)
                hostile_answer = asyncio.ensure_future(heartbeat(hostile, request))
                await asyncio.sleep(0)  # the heartbeat is written first
                metadata = bystander.send_at(MetadataRequest(topics=None), 12, MetadataResponse)
                try:
                    answered = await asyncio.wait_for(metadata, FROZEN_S)
                except asyncio.TimeoutError:
                    raise AssertionError("the broker answered no bystander while it resolved the regex") from None
                assert {t.name for t in answered.topics} >= set(long_names)
                assert (await hostile_answer).error_code == ErrorCode.NONE
            # The resolution works: a regex in another group gets its topic.
            victims = await assigned_topic_ids(member, join("benign", subscribed_topic_regex="victim-.*"))
            described = await bystander.send_at(MetadataRequest(topics=[
                MetadataRequest.MetadataRequestTopic(name="victim-a")]), 12, MetadataResponse)
            assert victims == {described.topics[0].topic_id}
        finally:
            for connection in (hostile, bystander, member):
                await connection.close()

    asyncio.run(scenario())


INVALID = {
    "backreference": r"(a+)+\1",  # RE2 has none: they need backtracking
    "lookahead": r"(?=victim)v.*",
    "lookbehind": r"(?<!x)victim",
    "atomic-group": r"victim(?>-a)",
    "possessive": r"a++b",
    "repetition-over-1000": r"x{1001}",
    "too-long": "(" + "|".join(f"topic-{i}" for i in range(5000)) + ")",  # longer than pybroker compiles
}


@pytest.mark.parametrize("regex", INVALID.values(), ids=INVALID.keys())
def test_a_regex_re2_cannot_run_is_invalid(regex_broker: BrokerProcess, regex: str) -> None:
    port = regex_broker.port
    assert port is not None

    async def scenario() -> ConsumerGroupHeartbeatResponse:
        connection = await Connection.open("127.0.0.1", port, timeout=30)
        try:
            return await heartbeat(connection, join(f"invalid-{uuid.uuid4()}", subscribed_topic_regex=regex))
        finally:
            await connection.close()

    answer = asyncio.run(scenario())
    assert answer.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert answer.error_message and "is not a valid regular expression" in answer.error_message
