"""Our client's consumer-protocol member (``pybroker.client.consumer_member``) against a broker process:
the member id (from the broker with ConsumerGroupHeartbeat v0, made up by the client from v1), rejoining
under the same id after UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH with its partitions lost and given back,
and leaving with epoch -1 (gone) or -2 (a static member kept for its return)."""

from __future__ import annotations

import asyncio
from typing import Iterator

import pytest

from pybroker.client import GroupAdmin, KafkaClient, NegotiatedVersions
from pybroker.client.consumer_member import ConsumerGroupMember, ConsumerMemberSettings, Listeners, new_member_id
from pybroker.common.topic import TopicPartition, topic_id_from_string
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic

PARTITIONS = 3
OVERRIDES = {
    "offsets.topic.num.partitions": "4",
    "group.consumer.heartbeat.interval.ms": "300",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("member848"), overrides=OVERRIDES).start()
    create_topic(process.bootstrap, "member-848", PARTITIONS)
    yield process
    process.kill()


class Recorder:
    """The listener calls, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def listeners(self) -> Listeners:
        def record(kind: str):
            async def call(partitions: list[TopicPartition]) -> None:
                self.calls.append((kind, [tp.partition for tp in partitions]))
            return call
        return Listeners(record("revoked"), record("assigned"), record("lost"))


async def member_in(client: KafkaClient, group: str, recorder: Recorder,
                    settings: ConsumerMemberSettings = ConsumerMemberSettings()) -> ConsumerGroupMember:
    member = ConsumerGroupMember(GroupAdmin(client), group, ["member-848"], settings, recorder.listeners())
    assert [tp.partition for tp in await member.join()] == list(range(PARTITIONS))
    await member.heartbeat()  # the acknowledgement: the broker now knows we own them
    return member


async def forget(client: KafkaClient, group: str, member_id: str) -> None:
    """Another connection makes the member leave, so the broker no longer knows it."""
    async def send(_node, connection) -> ConsumerGroupHeartbeatResponse:
        return await connection.send(ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id,
                                                                   member_epoch=-1),
                                     ConsumerGroupHeartbeatResponse)
    response = await GroupAdmin(client).on_coordinator(group, send)
    assert response.error_code == ErrorCode.NONE


def run(coroutine_factory, broker: BrokerProcess) -> None:
    async def go() -> None:
        async with KafkaClient(broker.bootstrap, timeout=10) as client:
            await coroutine_factory(client)
    asyncio.run(go())


def test_member_id_from_the_broker_at_v0_and_from_the_client_at_v1(broker: BrokerProcess) -> None:
    assert len(new_member_id()) == 22 and topic_id_from_string(new_member_id())

    async def scenario(client: KafkaClient) -> None:
        v0 = await member_in(client, "member-v0", Recorder())
        assert v0.member_id and v0.member_epoch > 0

        coordinator = await GroupAdmin(client).find_coordinator("member-v1")
        connection = await client.node(coordinator.node_id)
        chosen = {**connection.versions.chosen, ConsumerGroupHeartbeatRequest.API_KEY: 1}  # unstable: never chosen
        connection.versions = NegotiatedVersions(connection.versions.broker, chosen)
        v1 = ConsumerGroupMember(GroupAdmin(client), "member-v1", ["member-848"])
        await v1.join()
        assert len(v1.member_id) == 22, v1.member_id  # Kafka's Uuid text form, made up by the client
        described = await GroupAdmin(client).describe_group("member-v1")
        assert [m.member_id for m in described.members] == [v1.member_id]
        await v1.leave()
        await v0.leave()

    run(scenario, broker)


def test_rejoin_after_unknown_member_and_fenced_epoch_keeps_the_member_id(broker: BrokerProcess) -> None:
    async def scenario(client: KafkaClient) -> None:
        recorder = Recorder()
        member = await member_in(client, "member-fenced", recorder)
        member_id = member.member_id
        assert recorder.calls == [("assigned", [0, 1, 2])]

        await forget(client, "member-fenced", member_id)
        await member.heartbeat()  # UNKNOWN_MEMBER_ID: everything lost, epoch 0
        assert (member.member_epoch, member.owned) == (0, set())
        await member.join()
        assert member.member_id == member_id and member.member_epoch > 0

        member.member_epoch += 5  # an epoch the coordinator never gave
        await member.heartbeat()
        assert member.member_epoch == 0
        await member.join()
        assert member.member_id == member_id
        assert recorder.calls == [("assigned", [0, 1, 2]), ("lost", [0, 1, 2]), ("assigned", [0, 1, 2]),
                                  ("lost", [0, 1, 2]), ("assigned", [0, 1, 2])]
        described = await GroupAdmin(client).describe_group("member-fenced")
        assert [(m.member_id, m.member_epoch) for m in described.members] == [(member_id, member.member_epoch)]
        await member.leave()

    run(scenario, broker)


def test_leave_removes_a_dynamic_member_and_keeps_a_static_one(broker: BrokerProcess) -> None:
    async def scenario(client: KafkaClient) -> None:
        admin = GroupAdmin(client)
        static = await member_in(client, "member-leave", Recorder(), ConsumerMemberSettings(instance_id="i-1"))
        static_id = static.member_id
        dynamic = ConsumerGroupMember(admin, "member-leave", ["member-848"])
        await dynamic.join()
        assert len((await admin.describe_group("member-leave")).members) == 2

        await dynamic.leave()
        described = await admin.describe_group("member-leave")
        assert [(m.member_id, m.group_instance_id) for m in described.members] == [(static_id, "i-1")]

        await static.leave()  # epoch -2: the broker keeps the instance's place and assignment
        described = await admin.describe_group("member-leave")
        assert [(m.member_id, m.group_instance_id) for m in described.members] == [(static_id, "i-1")]
        assert {tp.partition for tp in described.members[0].assignment} == set(range(PARTITIONS))

    run(scenario, broker)
