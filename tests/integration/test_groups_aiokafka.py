"""Consumer groups with aiokafka: assignment under each assignor, rebalances, a killed member,
manual and automatic commits."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.structs import OffsetAndMetadata

from tests.eventually import eventually_async
from tests.integration.groups_common import (
    Consumed,
    assert_resumed_exactly,
    HEARTBEAT_INTERVAL_MS,
    KILL_SESSION_TIMEOUT_MS,
    MAX_POLL_INTERVAL_MS,
    MEMBERS,
    SESSION_TIMEOUT_MS,
    ChildMember,
    create_topic,
    group_broker,  # noqa: F401  (module fixture)
    is_balanced,
    positions_after,
    produce_keyed,
    report,
)

CLIENT = "aiokafka"
ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
             "sticky": StickyPartitionAssignor}


def new_consumer(bootstrap: str, group: str, topic: str | None = None, assignor: str = "range",
                 **overrides) -> AIOKafkaConsumer:
    config = dict(bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=SESSION_TIMEOUT_MS,
                  heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
                  rebalance_timeout_ms=MAX_POLL_INTERVAL_MS, partition_assignment_strategy=[ASSIGNORS[assignor]],
                  enable_auto_commit=False, auto_offset_reset="earliest")
    config.update(overrides)
    return AIOKafkaConsumer(*([topic] if topic else []), **config)




class Member(ConsumerRebalanceListener):
    """A subscribed consumer polled by its own task; ``assignment`` is what it currently owns."""

    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str = "range", **overrides):
        self.consumer = new_consumer(bootstrap, group, assignor=assignor, **overrides)
        self.topic = topic
        self.assignment: set[int] = set()
        self.assign_calls = 0
        self._task: asyncio.Task | None = None

    async def start(self) -> "Member":
        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=self)
        self._task = asyncio.create_task(self._run())
        return self

    async def on_partitions_revoked(self, revoked) -> None:
        pass

    async def on_partitions_assigned(self, assigned) -> None:
        self.assign_calls += 1

    async def _run(self) -> None:
        while True:
            await self.consumer.getmany(timeout_ms=50)
            self.assignment = {tp.partition for tp in self.consumer.assignment()}

    async def close(self) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        await self.consumer.stop()


async def close_all(members) -> None:
    for member in members:
        await member.close()


async def three_members(bootstrap: str, assignor: str) -> None:
    topic = group = f"aio-balance-{assignor}"
    create_topic(bootstrap, topic)
    started = time.monotonic()
    members = [Member(bootstrap, group, topic, assignor) for _ in range(MEMBERS)]
    try:
        await asyncio.gather(*(m.start() for m in members))
        await eventually_async(lambda: is_balanced(m.assignment for m in members),
                         lambda: f"{assignor}: 2 partitions each, have {[sorted(m.assignment) for m in members]}")
        report(CLIENT, f"3-member rebalance ({assignor})", time.monotonic() - started)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            [described] = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
        [(error_code, group_id, state, protocol_type, protocol, members_described, *_)] = described.groups
        assert (error_code, group_id, state) == (0, group, "Stable")
        assert (protocol_type, protocol) == ("consumer", assignor)
        assert len(members_described) == MEMBERS
    finally:
        await close_all(members)


@pytest.mark.parametrize("assignor", list(ASSIGNORS))
def test_three_members_share_six_partitions(group_broker, assignor):
    asyncio.run(three_members(group_broker.bootstrap, assignor))


async def new_member(bootstrap: str) -> None:
    topic = group = "aio-join"
    create_topic(bootstrap, topic)
    members = [await Member(bootstrap, group, topic).start() for _ in range(2)]
    try:
        await eventually_async(lambda: is_balanced(m.assignment for m in members), "3 partitions each for 2 members")
        calls = [m.assign_calls for m in members]
        members.append(await Member(bootstrap, group, topic).start())
        await eventually_async(lambda: is_balanced(m.assignment for m in members), "2 partitions each for 3 members")
        assert all(m.assign_calls > c for m, c in zip(members, calls)), "old members must rebalance"
    finally:
        await close_all(members)


def test_new_member_triggers_rebalance(group_broker):
    asyncio.run(new_member(group_broker.bootstrap))


async def killed_member(bootstrap: str) -> None:
    topic = group = "aio-kill"
    create_topic(bootstrap, topic)
    child = ChildMember(CLIENT, bootstrap, topic, group, KILL_SESSION_TIMEOUT_MS)
    members = [await Member(bootstrap, group, topic).start() for _ in range(2)]
    try:
        await eventually_async(lambda: is_balanced([child.assignment] + [m.assignment for m in members]),
                         lambda: f"balanced 3-member group (child says {child.lines[-3:]}, "
                                 f"others {[sorted(m.assignment) for m in members]})")
        orphaned = set(child.assignment)
        child.kill()
        killed_at = time.monotonic()
        await eventually_async(lambda: is_balanced(m.assignment for m in members), "the killed member's partitions to move",
                         timeout=KILL_SESSION_TIMEOUT_MS / 1000 + 20)
        report(CLIENT, "killed member -> reassigned", time.monotonic() - killed_at)
        assert orphaned <= set().union(*(m.assignment for m in members))
    finally:
        child.kill()
        await close_all(members)


def test_killed_member_is_removed_after_session_timeout(group_broker):
    asyncio.run(killed_member(group_broker.bootstrap))


def consumed(messages: list) -> list[Consumed]:
    """The client's messages as (partition, offset, value)."""
    return [(r.partition, r.offset, r.value) for r in messages]


async def consume(consumer: AIOKafkaConsumer, count: int, timeout: float = 30.0) -> list:
    received = []
    deadline = time.monotonic() + timeout
    while len(received) < count:
        assert time.monotonic() < deadline, f"only {len(received)} of {count} messages arrived"
        for records in (await consumer.getmany(timeout_ms=200, max_records=count - len(received))).values():
            received += records
    return received


async def assert_nothing_more(consumer: AIOKafkaConsumer, seconds: float = 1.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        extra = [r.value for records in (await consumer.getmany(timeout_ms=100)).values() for r in records]
        assert extra == [], f"unexpected extra messages {extra}"


async def resume(bootstrap: str) -> None:
    topic = group = "aio-resume"
    create_topic(bootstrap, topic)
    sent = produce_keyed(bootstrap, topic, 60)
    first = new_consumer(bootstrap, group, topic)
    await first.start()
    part = await consume(first, 25)
    next_offsets = positions_after(consumed(part))
    await first.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "") for p, o in next_offsets.items()})
    for p, o in next_offsets.items():
        assert await first.committed(TopicPartition(topic, p)) == o
    await first.stop()

    second = new_consumer(bootstrap, group, topic)
    await second.start()
    try:
        rest = await consume(second, len(sent) - len(part))
        await assert_nothing_more(second)
    finally:
        await second.stop()
    assert_resumed_exactly(consumed(part), consumed(rest), sent, next_offsets)


def test_commit_close_restart_resumes_exactly(group_broker):
    asyncio.run(resume(group_broker.bootstrap))


async def auto_commit(bootstrap: str) -> None:
    topic = group = "aio-autocommit"
    create_topic(bootstrap, topic)
    sent = produce_keyed(bootstrap, topic, 30)
    consumer = new_consumer(bootstrap, group, topic, enable_auto_commit=True, auto_commit_interval_ms=200)
    await consumer.start()
    try:
        received = await consume(consumer, len(sent))
        ends: dict[int, int] = {}
        for record in received:
            ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
        async def all_committed() -> bool:
            return {p: await consumer.committed(TopicPartition(topic, p)) for p in ends} == ends

        await eventually_async(all_committed, f"auto-commit up to the consumed ends {ends}", timeout=15, interval=0.1)
    finally:
        await consumer.stop()
    assert {r.value for r in received} == sent


def test_auto_commit(group_broker):
    asyncio.run(auto_commit(group_broker.bootstrap))
