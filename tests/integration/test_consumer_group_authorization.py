"""KIP-848 authorization as Kafka 4: alice may Describe only her topic, so a regex of hers resolves to
that topic alone, a subscription naming another topic is TOPIC_AUTHORIZATION_FAILED whether the topic
exists or not, and ConsumerGroupDescribe never shows her a group that names a topic she may not see."""

from __future__ import annotations

import asyncio
import uuid
from typing import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pybroker.client.connection import Connection
from pybroker.client.sasl import SaslCredentials
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    MetadataRequest,
    MetadataResponse,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_authorization import OVERRIDES
from tests.integration.test_consumer_group_regex import assigned_topic_ids, heartbeat, join
from tests.integration.test_sasl import ADMIN, librdkafka

SECRET_TOPICS = ("hr.salaries.2025", "hr.reviews", "finance.payroll", "legal.cases")
ALICE_TOPIC = "alice.events"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("kip848-authz"), {
        **OVERRIDES, "offsets.topic.num.partitions": "1"}).start()
    admin = AdminClient(librdkafka(process, "PLAIN", *ADMIN))
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in (ALICE_TOPIC, *SECRET_TOPICS)]).values():
        future.result(timeout=30)
    allow = [AclBinding(ResourceType.TOPIC, ALICE_TOPIC, ResourcePatternType.LITERAL, "User:alice", "*",
                        AclOperation.READ, AclPermissionType.ALLOW),
             AclBinding(ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*",
                        AclOperation.READ, AclPermissionType.ALLOW)]
    for future in admin.create_acls(allow).values():
        future.result(timeout=30)
    yield process
    process.kill()


async def connect(broker: BrokerProcess, user: str, password: str) -> Connection:
    assert broker.port is not None
    return await Connection.open("127.0.0.1", broker.port, timeout=30, sasl=SaslCredentials("PLAIN", user, password))


async def topic_id(connection: Connection, name: str) -> uuid.UUID:
    answer = await connection.send_at(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)]), 12,
                                      MetadataResponse)
    return answer.topics[0].topic_id


async def describe(connection: Connection, group: str) -> ConsumerGroupDescribeResponse.DescribedGroup:
    answer = await connection.send_at(ConsumerGroupDescribeRequest(group_ids=[group]), 0,
                                      ConsumerGroupDescribeResponse)
    return answer.groups[0]


def test_a_regex_resolves_only_to_topics_the_member_may_describe(secured: BrokerProcess) -> None:
    async def scenario() -> None:
        alice = await connect(secured, "alice", "alice-plain")
        try:
            assigned = await assigned_topic_ids(alice, join("alice-regex", subscribed_topic_regex=".*"))
            assert assigned == {await topic_id(alice, ALICE_TOPIC)}
            group = await describe(alice, "alice-regex")
            assert group.error_code == ErrorCode.NONE
            named = {tp.topic_name for m in group.members for tp in m.assignment.topic_partitions}
            assert named == {ALICE_TOPIC}
        finally:
            await alice.close()

    asyncio.run(scenario())


def test_subscribing_by_name_needs_describe_and_tells_nothing_of_existence(secured: BrokerProcess) -> None:
    async def scenario() -> list[int]:
        alice = await connect(secured, "alice", "alice-plain")
        try:
            return [(await heartbeat(alice, join("alice-names", subscribed_topic_names=names))).error_code
                    for names in ([SECRET_TOPICS[0]], ["no.such.topic"], [ALICE_TOPIC, SECRET_TOPICS[1]])]
        finally:
            await alice.close()

    assert asyncio.run(scenario()) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 3


def test_describe_hides_a_group_that_names_a_topic_the_caller_may_not_describe(secured: BrokerProcess) -> None:
    async def scenario() -> None:
        admin = await connect(secured, *ADMIN)
        alice = await connect(secured, "alice", "alice-plain")
        try:
            await assigned_topic_ids(admin, join("alice-shared", subscribed_topic_names=[SECRET_TOPICS[0]]))
            refused = await describe(alice, "alice-shared")
            assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert refused.members == [] and SECRET_TOPICS[0] not in repr(refused)
            shown = await describe(admin, "alice-shared")
            assert shown.error_code == ErrorCode.NONE
            assert {tp.topic_name for m in shown.members for tp in m.assignment.topic_partitions} == {SECRET_TOPICS[0]}
        finally:
            await alice.close()
            await admin.close()

    asyncio.run(scenario())
