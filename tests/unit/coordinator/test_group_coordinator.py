"""The classic group coordinator's state machine, driven with a manual clock and no I/O."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest

from pybroker.coordinator.coordinator import GroupConfig, GroupCoordinator, JoinRequest, Outcome
from pybroker.coordinator.group import GroupState
from pybroker.coordinator.loader import replay
from pybroker.coordinator.records import group_record, partition_for
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ConsumerProtocolSubscription,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
)
from pybroker.records import RecordInput, build_batch

GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
WRITE_POSITIONS = itertools.count(1)


class Waiter:
    """A named stand-in for the runtime's future."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Waiter({self.name})"


def answers(outcome: Outcome) -> dict[Waiter, Any]:
    return dict(outcome.replies)


def subscription(*topics: str) -> bytes:
    return struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=list(topics)).encode(0)


def join(c: GroupCoordinator, now: int, member_id: str = "", *, version: int = 5, instance: str | None = None,
         protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),), session: int = SESSION_MS,
         protocol_type: str = "consumer", group: str = GROUP) -> tuple[Waiter, Outcome]:
    waiter = Waiter(f"join-{member_id or instance or 'new'}@{now}")
    request = JoinGroupRequest(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=REBALANCE_MS,
                               member_id=member_id, group_instance_id=instance, protocol_type=protocol_type,
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
                                          for n, m in protocols])
    return waiter, c.join_group(waiter, JoinRequest(request, version, "client", "/127.0.0.1"), now)


def sync(c: GroupCoordinator, now: int, member_id: str, generation: int,
         assignments: dict[str, bytes] | None = None, instance: str | None = None) -> tuple[Waiter, Outcome]:
    waiter = Waiter(f"sync-{member_id}@{now}")
    request = SyncGroupRequest(group_id=GROUP, generation_id=generation, member_id=member_id,
                               group_instance_id=instance,
                               assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                            for m, a in (assignments or {}).items()])
    return waiter, c.sync_group(waiter, request, now)


def heartbeat(c: GroupCoordinator, now: int, member_id: str, generation: int, instance: str | None = None,
              group: str = GROUP) -> int:
    waiter = Waiter("hb")
    out = c.heartbeat(waiter, HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                               group_instance_id=instance), now)
    return answers(out)[waiter].error_code


def commit(c: GroupCoordinator, now: int, generation: int = -1, member_id: str = "",
           offsets: dict[tuple[str, int], int] | None = None, metadata: str = "", group: str = GROUP) -> tuple[
        dict[tuple[str, int], int], Outcome]:
    by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in (offsets or {("t", 0): 5}).items():
        by_topic.setdefault(topic, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata=metadata))
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                                  topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                                          for t, ps in by_topic.items()])
    waiter = Waiter("commit")
    out = c.commit_offsets(waiter, request, now)
    c.offsets_written(out.staged, {c.partition_of(group): next(WRITE_POSITIONS)})  # as the runtime, once replicated
    response = answers(out)[waiter]
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}, out


def finish_join(c: GroupCoordinator, now: int) -> dict[Waiter, Any]:
    """Tick past the initial delay and the extension each newcomer bought; the answers given meanwhile."""
    replies: dict[Waiter, Any] = {}
    for k in (1, 2):
        replies.update(answers(c.tick(now + k * c.config.initial_rebalance_delay_ms)))
    return replies


def stable_group(c: GroupCoordinator, members: int = 2, now: int = 0) -> tuple[list[str], int]:
    """Members join (v3: no MEMBER_ID_REQUIRED round), the leader syncs; returns member ids and generation."""
    waiters = [join(c, now, version=3)[0] for _ in range(members)]
    replies = finish_join(c, now)
    responses = [replies[w] for w in waiters]
    ids = [r.member_id for r in responses]
    leader = responses[0].leader
    generation = responses[0].generation_id
    for member_id in [m for m in ids if m != leader] + [leader]:
        sync(c, now + 1, member_id, generation, {x: x.encode() for x in ids} if member_id == leader else None)
    assert c.groups[GROUP].state is GroupState.STABLE
    return ids, generation


@pytest.fixture
def coordinator() -> GroupCoordinator:
    return GroupCoordinator(GroupConfig(num_partitions=50, initial_rebalance_delay_ms=3000))


def test_partition_of_a_group_matches_kafka_java_hash_examples():
    assert partition_for("my-group", 50) == 12
    assert partition_for("test", 50) == 48
    assert partition_for("polygenelubricants", 50) == 0


def test_join_v4_without_member_id_gets_member_id_required(coordinator):
    waiter, out = join(coordinator, 0, version=4)
    response = answers(out)[waiter]
    assert response.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert response.member_id.startswith("client-")
    assert coordinator.groups[GROUP].pending_member_deadlines


def test_pending_member_id_expires_after_session_timeout(coordinator):
    join(coordinator, 0, version=4)
    coordinator.tick(SESSION_MS)
    assert GROUP not in coordinator.groups or not coordinator.groups[GROUP].pending_member_deadlines


def test_first_join_waits_for_the_initial_rebalance_delay(coordinator):
    waiter, out = join(coordinator, 0, version=3)
    assert out.replies == []
    assert coordinator.groups[GROUP].state is GroupState.PREPARING_REBALANCE
    assert answers(coordinator.tick(2999)) == {}
    response = answers(coordinator.tick(3000))[waiter]
    assert response.error_code == 0
    assert response.generation_id == 1
    assert response.leader == response.member_id
    assert [m.member_id for m in response.members] == [response.member_id]
    assert coordinator.groups[GROUP].state is GroupState.COMPLETING_REBALANCE


def test_initial_delay_is_extended_by_each_newcomer_up_to_the_rebalance_timeout(coordinator):
    join(coordinator, 0, version=3)
    join(coordinator, 2000, version=3)
    assert answers(coordinator.tick(3000)) == {}  # a newcomer arrived: another delay
    assert len(answers(coordinator.tick(6000))) == 2


def test_join_with_member_id_after_member_id_required_joins_the_group(coordinator):
    first, out = join(coordinator, 0, version=5)
    member_id = answers(out)[first].member_id
    second, out = join(coordinator, 1, member_id, version=5)
    assert out.replies == []
    response = finish_join(coordinator, 1)[second]
    assert response.error_code == 0 and response.member_id == member_id


def test_leader_gets_member_list_and_follower_gets_none(coordinator):
    w1, _ = join(coordinator, 0, version=3)
    w2, _ = join(coordinator, 0, version=3)
    replies = finish_join(coordinator, 0)
    leader, follower = (replies[w1], replies[w2]) if replies[w1].members else (replies[w2], replies[w1])
    assert len(leader.members) == 2 and follower.members == []
    assert leader.leader == follower.leader == leader.member_id
    assert leader.protocol_name == "range"


def test_protocol_selection_votes_for_the_most_preferred_common_protocol(coordinator):
    w1, _ = join(coordinator, 0, version=3, protocols=(("sticky", b""), ("range", b"")))
    w2, _ = join(coordinator, 0, version=3, protocols=(("range", b""), ("sticky", b"")))
    w3, _ = join(coordinator, 0, version=3, protocols=(("sticky", b""), ("range", b"")))
    replies = finish_join(coordinator, 0)
    assert {replies[w].protocol_name for w in (w1, w2, w3)} == {"sticky"}


def test_sync_follower_waits_for_leader_then_group_is_stable_and_persisted(coordinator):
    w1, _ = join(coordinator, 0, version=3)
    w2, _ = join(coordinator, 0, version=3)
    replies = finish_join(coordinator, 0)
    leader = replies[w1].leader
    follower = replies[w2].member_id if replies[w2].member_id != leader else replies[w1].member_id
    follower_sync, out = sync(coordinator, 3001, follower, 1)
    assert out.replies == []
    leader_sync, out = sync(coordinator, 3002, leader, 1, {leader: b"A", follower: b"B"})
    replies = answers(out)
    assert replies[follower_sync].assignment == b"B"
    assert replies[leader_sync].assignment == b"A"
    assert coordinator.groups[GROUP].state is GroupState.STABLE
    assert [p for p, _ in out.records] == [partition_for(GROUP, 50)]


def test_sync_errors(coordinator):
    ids, generation = stable_group(coordinator)
    w, out = sync(coordinator, 10, "nobody", generation)
    assert answers(out)[w].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    w, out = sync(coordinator, 10, ids[0], generation + 1)
    assert answers(out)[w].error_code == ErrorCode.ILLEGAL_GENERATION
    w, out = sync(coordinator, 10, ids[0], generation)
    assert answers(out)[w].assignment == ids[0].encode()  # Stable: answered from the stored assignment


def test_heartbeat_error_codes(coordinator):
    assert heartbeat(coordinator, 0, "m", 1, group="missing") == ErrorCode.UNKNOWN_MEMBER_ID
    ids, generation = stable_group(coordinator)
    assert heartbeat(coordinator, 10, ids[0], generation) == ErrorCode.NONE
    assert heartbeat(coordinator, 10, ids[0], generation + 1) == ErrorCode.ILLEGAL_GENERATION
    assert heartbeat(coordinator, 10, "stranger", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    join(coordinator, 20, version=3)  # a newcomer starts a rebalance
    assert heartbeat(coordinator, 30, ids[1], generation) == ErrorCode.REBALANCE_IN_PROGRESS


def test_new_member_rebalances_a_stable_group_and_old_members_rejoin(coordinator):
    ids, generation = stable_group(coordinator)
    newcomer, _ = join(coordinator, 100, version=3)
    assert coordinator.groups[GROUP].state is GroupState.PREPARING_REBALANCE
    rejoin = [join(coordinator, 200, m, version=3)[0] for m in ids[:-1]]
    w_last, out = join(coordinator, 200, ids[-1], version=3)
    replies = answers(out)
    assert {replies[w].generation_id for w in [*rejoin, w_last, newcomer]} == {generation + 1}
    assert coordinator.groups[GROUP].state is GroupState.COMPLETING_REBALANCE


def test_pending_sync_is_answered_rebalance_in_progress_when_a_member_joins(coordinator):
    w1, _ = join(coordinator, 0, version=3)
    w2, _ = join(coordinator, 0, version=3)
    replies = finish_join(coordinator, 0)
    follower = next(r.member_id for r in replies.values() if not r.members)
    waiting, _ = sync(coordinator, 3001, follower, 1)
    _, out = join(coordinator, 3002, version=3)
    assert answers(out)[waiting].error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_silent_member_is_expired_after_session_timeout_and_group_rebalances(coordinator):
    ids, generation = stable_group(coordinator)
    heartbeat(coordinator, SESSION_MS - 1, ids[0], generation)
    coordinator.tick(SESSION_MS + 1)
    group = coordinator.groups[GROUP]
    assert ids[1] not in group.members and ids[0] in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    w, out = join(coordinator, SESSION_MS + 2, ids[0], version=3)
    response = answers(out)[w]
    assert response.generation_id == generation + 1 and [m.member_id for m in response.members] == [ids[0]]


def test_rebalance_timeout_drops_members_that_do_not_rejoin(coordinator):
    ids, generation = stable_group(coordinator)
    w, _ = join(coordinator, 100, ids[0], version=3)  # the leader rejoins: rebalance
    for t in range(1000, REBALANCE_MS, 5000):
        heartbeat(coordinator, t, ids[1], generation)
        coordinator.tick(t)
    replies = answers(coordinator.tick(100 + REBALANCE_MS))
    assert replies[w].generation_id == generation + 1
    assert list(coordinator.groups[GROUP].members) == [ids[0]]


def test_last_member_leaving_empties_the_group(coordinator):
    ids, generation = stable_group(coordinator, members=1)
    waiter = Waiter("leave")
    out = coordinator.leave_group(waiter, LeaveGroupRequest(group_id=GROUP, member_id=ids[0]), 1, 50)
    assert answers(out)[waiter].error_code == 0
    coordinator.tick(50)
    assert coordinator.groups[GROUP].state is GroupState.EMPTY
    assert coordinator.groups[GROUP].generation_id == generation + 1


def test_batched_leave_reports_each_member(coordinator):
    ids, _ = stable_group(coordinator)
    waiter = Waiter("leave")
    request = LeaveGroupRequest(group_id=GROUP, members=[LeaveGroupRequest.MemberIdentity(member_id=ids[0]),
                                                         LeaveGroupRequest.MemberIdentity(member_id="ghost")])
    response = answers(coordinator.leave_group(waiter, request, 3, 50))[waiter]
    assert response.error_code == 0
    assert [(m.member_id, m.error_code) for m in response.members] == [(ids[0], 0),
                                                                        ("ghost", ErrorCode.UNKNOWN_MEMBER_ID)]


def test_static_member_restart_keeps_generation_and_fences_the_old_id(coordinator):
    w1, _ = join(coordinator, 0, version=5, instance="a")
    w2, _ = join(coordinator, 0, version=5, instance="b")
    replies = finish_join(coordinator, 0)
    generation = replies[w1].generation_id
    old_b = replies[w2].member_id
    leader = replies[w1].leader
    sync(coordinator, 3001, leader, generation, {replies[w1].member_id: b"A", old_b: b"B"})
    sync(coordinator, 3001, old_b, generation)
    waiter, out = join(coordinator, 4000, version=5, instance="b")  # restarted: no member id
    response = answers(out)[waiter]
    assert response.error_code == 0 and response.generation_id == generation
    assert response.member_id != old_b and response.members == []
    assert coordinator.groups[GROUP].state is GroupState.STABLE
    assert heartbeat(coordinator, 4001, old_b, generation, instance="b") == ErrorCode.FENCED_INSTANCE_ID
    w, out = sync(coordinator, 4002, response.member_id, generation, instance="b")
    assert answers(out)[w].assignment == b"B"


@pytest.mark.parametrize("version", [5, 9])
def test_a_restarted_static_leader_leads_without_assigning_from_v9(coordinator, version):
    """KIP-814: from JoinGroup v9 the restarted leader of a Stable group is its leader again, with the members (whose
    topics it watches) and SkipAssignment; before v9 it is told the old leader id, so it acts as a follower. Either
    way the group stays Stable and its SyncGroup gets the assignment it had."""
    w1, _ = join(coordinator, 0, version=version, instance="a")
    w2, _ = join(coordinator, 0, version=version, instance="b")
    replies = finish_join(coordinator, 0)
    generation, leader = replies[w1].generation_id, replies[w1].leader
    [leader_waiter] = [w for w in (w1, w2) if replies[w].member_id == leader]
    instance = "a" if leader_waiter is w1 else "b"
    other = replies[w2 if leader_waiter is w1 else w1].member_id
    sync(coordinator, 3001, leader, generation, {leader: b"L", other: b"O"})
    waiter, out = join(coordinator, 4000, version=version, instance=instance)  # the leader restarted
    response = answers(out)[waiter]
    assert response.error_code == 0 and response.generation_id == generation
    if version >= 9:
        assert (response.leader, response.skip_assignment) == (response.member_id, True)
        assert sorted(m.group_instance_id for m in response.members) == ["a", "b"]
    else:
        assert (response.leader, response.skip_assignment, response.members) == (leader, False, [])
    assert coordinator.groups[GROUP].state is GroupState.STABLE
    w, out = sync(coordinator, 4001, response.member_id, generation, instance=instance)
    assert answers(out)[w].assignment == b"L"


def test_group_max_size_rejects_extra_members():
    coordinator = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0, max_size=1))
    join(coordinator, 0, version=3)
    waiter, out = join(coordinator, 1, version=3)
    assert answers(out)[waiter].error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_join_validation_errors(coordinator):
    waiter, out = join(coordinator, 0, session=1)
    assert answers(out)[waiter].error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    waiter, out = join(coordinator, 0, group="")
    assert answers(out)[waiter].error_code == ErrorCode.INVALID_GROUP_ID
    waiter, out = join(coordinator, 0, "someone", version=3)
    assert answers(out)[waiter].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    stable_group(coordinator, members=1)
    waiter, out = join(coordinator, 10, version=3, protocol_type="connect")
    assert answers(out)[waiter].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    waiter, out = join(coordinator, 10, version=3, protocols=(("other", b""),))
    assert answers(out)[waiter].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_simple_commit_creates_an_empty_group_and_fetch_returns_it(coordinator):
    codes, out = commit(coordinator, 0, offsets={("t", 0): 5, ("t", 1): 7}, metadata="m")
    assert set(codes.values()) == {0}
    assert len(out.records) == 2
    assert coordinator.groups[GROUP].state is GroupState.EMPTY
    fetched = dict(coordinator.fetch_offsets(GROUP, None))
    assert [(p, c.offset, c.metadata) for p, c in fetched["t"]] == [(0, 5, "m"), (1, 7, "m")]
    assert coordinator.fetch_offsets(GROUP, [("t", [2])]) == [("t", [(2, None)])]


def test_commit_member_and_generation_checks(coordinator):
    codes, _ = commit(coordinator, 0, generation=3, member_id="m", group="nogroup")
    assert set(codes.values()) == {ErrorCode.ILLEGAL_GENERATION}
    ids, generation = stable_group(coordinator)
    assert set(commit(coordinator, 10, generation, ids[0])[0].values()) == {0}
    assert set(commit(coordinator, 10, generation + 1, ids[0])[0].values()) == {ErrorCode.ILLEGAL_GENERATION}
    assert set(commit(coordinator, 10, generation, "ghost")[0].values()) == {ErrorCode.UNKNOWN_MEMBER_ID}
    assert set(commit(coordinator, 10, -1)[0].values()) == {ErrorCode.UNKNOWN_MEMBER_ID}  # only members commit
    too_long = commit(coordinator, 10, generation, ids[0], metadata="x" * 5000)[0]
    assert set(too_long.values()) == {ErrorCode.OFFSET_METADATA_TOO_LARGE}


def test_commit_during_completing_rebalance_is_refused(coordinator):
    waiter, _ = join(coordinator, 0, version=3)
    response = answers(coordinator.tick(3000))[waiter]
    codes, _ = commit(coordinator, 3001, response.generation_id, response.member_id)
    assert set(codes.values()) == {ErrorCode.REBALANCE_IN_PROGRESS}


def test_delete_groups_refuses_non_empty_groups_and_tombstones_empty_ones(coordinator):
    stable_group(coordinator)
    commit(coordinator, 0, offsets={("t", 0): 1}, group="simple")
    waiter = Waiter("delete")
    out = coordinator.delete_groups(waiter, [GROUP, "simple", "missing"], 10)
    codes = {r.group_id: r.error_code for r in answers(out)[waiter].results}
    assert codes == {GROUP: ErrorCode.NON_EMPTY_GROUP, "simple": 0, "missing": ErrorCode.GROUP_ID_NOT_FOUND}
    assert "simple" not in coordinator.groups
    assert [value for _, (_, value) in out.records] == [None, None]  # offset and group tombstones


def test_offset_delete_refuses_topics_the_group_subscribes_to(coordinator):
    ids, generation = stable_group(coordinator)
    commit(coordinator, 10, generation, ids[0], offsets={("t", 0): 1, ("other", 0): 2})
    request = OffsetDeleteRequest(group_id=GROUP, topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name=name, partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]) for name in ("t", "other")])
    waiter = Waiter("offset-delete")
    response = answers(coordinator.delete_offsets(waiter, request, 20))[waiter]
    codes = {t.name: t.partitions[0].error_code for t in response.topics}
    assert codes == {"t": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, "other": 0}
    assert ("other", 0) not in coordinator.groups[GROUP].offsets


def test_offsets_of_an_empty_group_expire_after_retention():
    coordinator = GroupCoordinator(GroupConfig(offsets_retention_ms=1000, offsets_retention_check_interval_ms=100))
    commit(coordinator, 0, offsets={("t", 0): 1})
    coordinator.tick(0)
    assert GROUP in coordinator.groups
    out = coordinator.tick(1100)
    assert GROUP not in coordinator.groups
    assert all(value is None for _, (_, value) in out.records) and len(out.records) == 2


def test_describe_and_list_groups(coordinator):
    ids, _ = stable_group(coordinator)
    commit(coordinator, 0, group="simple")
    described = coordinator.describe_group(GROUP, 5, include_operations=True)
    assert described.group_state == "Stable" and described.protocol_data == "range"
    assert {m.member_id: m.member_assignment for m in described.members} == {m: m.encode() for m in ids}
    assert described.members[0].client_host == "/127.0.0.1"
    missing = coordinator.describe_group("missing", 5, include_operations=False)
    assert missing.group_state == "Dead" and missing.error_code == 0
    listed = coordinator.list_groups(["stable"], [])
    assert [(g.group_id, g.group_state) for g in listed] == [(GROUP, "Stable")]
    assert {g.group_id for g in coordinator.list_groups([], [])} == {GROUP, "simple"}


def test_replaying_persisted_records_restores_offsets_and_membership(coordinator):
    ids, generation = stable_group(coordinator)
    records = [group_record(coordinator.groups[GROUP])]
    records += [r for _, r in commit(coordinator, 10, generation, ids[0], offsets={("t", 0): 42})[1].records]
    records += [r for _, r in commit(coordinator, 20, offsets={("t", 1): 9}, group="simple")[1].records]
    records += [r for _, r in coordinator.delete_groups(Waiter("delete"), ["simple"], 30).records]
    restored = GroupCoordinator(coordinator.config)
    restored.load(replay([build_batch([RecordInput(k, v) for k, v in records])]), 1000)
    assert set(restored.groups) == {GROUP}
    group = restored.groups[GROUP]
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert set(group.members) == set(ids)
    assert group.offsets[("t", 0)].offset == 42
    assert heartbeat(restored, 1001, ids[0], generation) == ErrorCode.NONE
    restored.tick(1000 + SESSION_MS)
    assert restored.groups[GROUP].state is GroupState.PREPARING_REBALANCE  # silent restored members expire


def test_unload_drops_the_partitions_groups_and_returns_their_pending_waiters(coordinator):
    other = next(g for g in ("a", "b", "c", "d", "e") if coordinator.partition_of(g) != coordinator.partition_of(GROUP))
    commit(coordinator, 0, group=other)
    waiter, _ = join(coordinator, 0, version=3)  # waits out the initial rebalance delay
    waiters = coordinator.unload(coordinator.partition_of(GROUP))
    assert waiters == [waiter]
    assert GROUP not in coordinator.groups and other in coordinator.groups
