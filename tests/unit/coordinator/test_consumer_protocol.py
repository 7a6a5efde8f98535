"""The consumer group protocol (KIP-848) as a pure state machine: epochs, server-side assignment and
incremental reconciliation, fencing, static membership and bad input."""

from __future__ import annotations

import uuid

import pytest

from pybroker.coordinator.assignors import range_assignor, uniform
from pybroker.coordinator.consumer import Heartbeat, TopicImage
from pybroker.coordinator.consumer_group import ConsumerGroupState
from pybroker.coordinator.consumer_regex import REFRESH_INTERVAL_MS
from pybroker.coordinator.topic_regex import invalid_reason, resolve
from pybroker.coordinator.coordinator import GroupConfig, GroupCoordinator
from pybroker.coordinator.loader import replay
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, OffsetCommitRequest
from pybroker.records import RecordInput, build_batch

GROUP = "g"
TOPIC_ID = uuid.uuid4()
IMAGE = TopicImage({"t": (TOPIC_ID, 6)})
Partitions = ConsumerGroupHeartbeatRequest.TopicPartitions


class Member:
    """A well-behaved client: it owns what it was assigned, minus what it revoked."""

    def __init__(self, c: GroupCoordinator, member_id: str, instance_id: str | None = None,
                 written: list[tuple[bytes, bytes | None]] | None = None) -> None:
        self.c, self.member_id, self.instance_id = c, member_id, instance_id
        self.epoch = 0
        self.owned: set[int] = set()
        self.written = written if written is not None else []
        """Every record the coordinator wrote for this member's heartbeats."""

    def beat(self, now: int = 0, image: TopicImage = IMAGE, **fields: object) -> ConsumerGroupHeartbeatResponse:
        request = ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=self.member_id, member_epoch=self.epoch, instance_id=self.instance_id,
            rebalance_timeout_ms=30000 if self.epoch == 0 else -1,
            subscribed_topic_names=["t"] if self.epoch == 0 else None,
            topic_partitions=[Partitions(topic_id=TOPIC_ID, partitions=sorted(self.owned))] if self.owned else [])
        for name, value in fields.items():
            setattr(request, name, value)
        out = self.c.consumer_group_heartbeat("w", Heartbeat(request, 1, "client", "/127.0.0.1", image), now)
        [(_, response)] = out.replies
        self.written.extend(record for _, record in out.records)
        for refresh in out.tasks:  # what the runtime does in the regex worker
            resolved = self.c.regexes_resolved(refresh, resolve(sorted(refresh.patterns), list(refresh.image.topics)))
            self.written.extend(record for _, record in resolved.records)
        if response.error_code == 0:
            self.epoch = response.member_epoch
            if response.assignment is not None:
                self.owned = {p for tp in response.assignment.topic_partitions for p in tp.partitions}
        return response


def coordinator() -> GroupCoordinator:
    return GroupCoordinator(GroupConfig(consumer_heartbeat_interval_ms=1000, consumer_session_timeout_ms=10000))


def settle(members: list[Member], now: int = 0) -> None:
    for _ in range(5):
        for m in members:
            m.beat(now)


def test_three_members_split_six_partitions_and_a_fourth_moves_only_what_it_takes() -> None:
    c = coordinator()
    members = [Member(c, f"m{i}") for i in range(3)]
    settle(members)
    assert sorted(len(m.owned) for m in members) == [2, 2, 2]
    assert set().union(*(m.owned for m in members)) == set(range(6))
    assert c.groups[GROUP].state is ConsumerGroupState.STABLE
    before = {m.member_id: set(m.owned) for m in members}
    newcomer = Member(c, "m3")
    newcomer.beat()
    assert newcomer.owned == set()  # everything is still owned by someone
    for m in members:
        m.beat()  # the ones that lose a partition are told to revoke it; their epoch stays
    settle(members + [newcomer])
    assert sorted(len(m.owned) for m in members + [newcomer]) == [1, 1, 2, 2]
    assert set().union(*(m.owned for m in members + [newcomer])) == set(range(6))
    assert sum(len(before[m.member_id] - m.owned) for m in members) == 1  # only the one that moved
    assert all(m.owned <= before[m.member_id] for m in members)
    assert len({m.epoch for m in members + [newcomer]}) == 1


def test_a_partition_is_not_given_before_its_owner_revoked_it() -> None:
    c = coordinator()
    a, b = Member(c, "a"), Member(c, "b")
    a.beat()
    assert a.owned == set(range(6))
    b.beat()
    assert b.owned == set()
    response = a.beat()  # told to keep three
    assert len(response.assignment.topic_partitions[0].partitions) == 3
    released = set(range(6)) - a.owned
    assert b.beat().assignment.topic_partitions == []  # not before a acknowledges
    a.beat()  # a's owned partitions no longer list them: revoked
    b.beat()
    assert b.owned == released


def test_leave_moves_the_partitions_and_session_expiry_removes_silent_members() -> None:
    c = coordinator()
    a, b, d = Member(c, "a"), Member(c, "b"), Member(c, "d")
    settle([a, b, d])
    assert a.beat(member_epoch=-1).member_epoch == -1
    settle([b, d])
    assert b.owned | d.owned == set(range(6)) and len(b.owned) == len(d.owned) == 3
    c.tick(5000)
    b.beat(6000)
    c.tick(12000)  # d was silent for more than the session timeout
    assert list(c.groups[GROUP].members) == ["b"]
    settle([b], 12000)
    assert b.owned == set(range(6))


def test_fencing_unknown_members_and_bad_input() -> None:
    c = coordinator()
    a = Member(c, "a")
    a.beat()
    assert a.beat(member_epoch=a.epoch + 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert Member(c, "nobody").beat(member_epoch=3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert Member(c, "x").beat(server_assignor="sticky").error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert invalid_reason("t(") == "missing ): t("  # the handler's check, in the regex worker
    assert Member(c, "x").beat(rebalance_timeout_ms=-1).error_code == ErrorCode.INVALID_REQUEST
    assert Member(c, "").beat().error_code == ErrorCode.INVALID_REQUEST
    assert a.beat().error_code == 0 and a.owned == set(range(6))  # the group was not disturbed


def test_static_member_leaves_and_returns_with_its_assignment() -> None:
    c = coordinator()
    a, b = Member(c, "a", "inst-a"), Member(c, "b")
    settle([a, b])
    kept, epoch = set(a.owned), a.epoch
    assert Member(c, "a2", "inst-a").beat().error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert a.beat(member_epoch=-2).member_epoch == -2
    back = Member(c, "a3", "inst-a")
    back.beat()
    assert back.owned == kept and back.epoch == epoch
    assert c.groups[GROUP].group_epoch == epoch  # no rebalance for a static bounce


def test_regex_subscription_follows_topic_creation_and_partition_growth() -> None:
    c = coordinator()
    a = Member(c, "a")
    joined = a.beat(subscribed_topic_names=None, subscribed_topic_regex="t.*")
    assert joined.assignment is not None and not joined.assignment.topic_partitions  # resolved off the loop
    a.beat()
    assert a.owned == set(range(6))
    other = uuid.uuid4()
    grown = TopicImage({"t": (TOPIC_ID, 8), "tx": (other, 2), "u": (uuid.uuid4(), 1)}, version=1)
    response = a.beat(image=grown)  # partitions at once; new topics at the next batched refresh
    assigned = {tp.topic_id: set(tp.partitions) for tp in response.assignment.topic_partitions}
    assert assigned == {TOPIC_ID: set(range(8))}
    a.beat(REFRESH_INTERVAL_MS, image=grown)
    response = a.beat(REFRESH_INTERVAL_MS, image=grown)
    assigned = {tp.topic_id: set(tp.partitions) for tp in response.assignment.topic_partitions}
    assert assigned == {TOPIC_ID: set(range(8)), other: {0, 1}}


def test_a_regex_keeps_its_topics_until_resolved_after_a_coordinator_load() -> None:
    """A reloaded group has no resolutions (they are not persisted): members keep their targets meanwhile."""
    c = coordinator()
    a = Member(c, "a")
    a.beat(subscribed_topic_names=None, subscribed_topic_regex="t.*")
    a.beat()
    assert a.owned == set(range(6))
    group = c.groups[GROUP]
    group.resolved_regexes.clear()
    epoch = group.group_epoch
    response = Member(c, "b").beat(subscribed_topic_names=["t"])
    assert response.error_code == 0 and c.groups[GROUP].group_epoch == epoch + 2  # b joined, then resolved
    a.beat()
    assert len(a.owned) == 3  # shared with b, never all revoked


def test_offset_commit_takes_the_member_epoch_as_generation() -> None:
    c = coordinator()
    a = Member(c, "a")
    a.beat()

    def commit(epoch: int) -> int:
        request = OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=epoch, member_id="a", topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])])
        [(_, response)] = c.commit_offsets("w", request, 0).replies
        return response.topics[0].partitions[0].error_code

    assert commit(a.epoch) == 0
    assert commit(a.epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH


@pytest.mark.parametrize("assignor", [uniform, range_assignor])
def test_assignors_balance(assignor) -> None:  # type: ignore[no-untyped-def]
    subscriptions = {m: {"t"} for m in ("a", "b", "c")}
    result = assignor(subscriptions, {"t": 7}, {})
    assert sorted(len(result[m].get("t", ())) for m in subscriptions) == [2, 2, 3]
    if assignor is range_assignor:
        assert result["a"]["t"] == frozenset({0, 1, 2})


def test_a_reloaded_coordinator_keeps_every_members_assignment_and_epoch() -> None:
    c = coordinator()
    written: list[tuple[bytes, bytes | None]] = []
    a, b, d = (Member(c, name, written=written) for name in ("a", "b", "d"))
    d.instance_id = "inst-d"
    settle([a, b, d])
    a.beat()
    d.beat(member_epoch=-2)  # a static member away: its assignment waits for it
    b.beat(member_epoch=-1)  # gone for good
    c.tick(1)
    original = c.groups[GROUP]
    restored = coordinator()
    restored.load(replay([build_batch([RecordInput(k, v) for k, v in written])]), 100)
    group = restored.groups[GROUP]
    assert (group.group_epoch, group.assignment_epoch) == (original.group_epoch, original.assignment_epoch)
    assert set(group.members) == {"a", "d"} and group.members["d"].left_static
    for member_id in ("a", "d"):
        old, new = original.members[member_id], group.members[member_id]
        assert (new.member_epoch, new.assigned, new.revoking, new.state) == \
            (old.member_epoch, old.assigned, old.revoking, old.state)
        assert group.target[member_id] == original.target[member_id]
    a.c = restored
    assert a.beat(100).error_code == 0  # a carries on with the epoch it had
    back = Member(restored, "d2", "inst-d")
    assert back.beat(100).error_code == 0
    assert back.owned >= original.members["d"].assigned["t"]  # its partitions, and what b's leaving freed
    settle([a, back], 100)
    assert a.owned | back.owned == set(range(6)) and not a.owned & back.owned
