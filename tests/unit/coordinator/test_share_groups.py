"""Share group membership (KIP-932): member epochs, fencing, the simple assignor, session timeouts, listing and
deletion, and the share group configs' bounds."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from pybroker.controller.group_config_store import FileGroupConfigStore
from pybroker.coordinator.consumer_group import TopicImage
from pybroker.coordinator.share.configs import GroupConfigError, ShareConfigs, ShareLimits, parse_reset
from pybroker.coordinator.records import decode_record
from pybroker.coordinator.share import records as share_records
from pybroker.coordinator.share.group import ShareGroup, ShareGroups, ShareGroupSettings
from pybroker.coordinator.share.records import ShareLoad
from pybroker.coordinator.share.state_partitions import StatePartitions
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ShareGroupHeartbeatRequest

T1, T2, T3 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
IMAGE = TopicImage({"t1": (T1, 2), "t2": (T2, 3)})
RETRY_MS = 30_000


def _beat(groups: ShareGroups, member: str, epoch: int, topics: list[str] | None = None, now: int = 0,
          image: TopicImage = IMAGE):
    """One heartbeat as the share service answers it when the share coordinator initializes the new partitions at
    once: the partitions initialized, then the member's answer again (with them assigned)."""
    response, _ = groups.heartbeat(ShareGroupHeartbeatRequest(group_id="g", member_id=member, member_epoch=epoch,
                                                              subscribed_topic_names=topics),
                                   "client", "/127.0.0.1", image, now)
    if response.error_code or epoch == -1:
        return response
    pending = groups.to_initialize("g", image, now, RETRY_MS).partitions
    if not pending:
        return response
    groups.groups["g"].state_partitions.initialize_done(pending)
    return groups.reconcile("g", member, image, full=epoch == 0)


def _assigned(response) -> dict[uuid.UUID, list[int]]:
    return {tp.topic_id: tp.partitions for tp in response.assignment.topic_partitions}


def test_members_join_with_epoch_zero_and_get_every_partition_spread_over_them() -> None:
    groups = ShareGroups(ShareGroupSettings())
    first = _beat(groups, "a", 0, ["t1"])  # epoch 1 joins, epoch 2 assigns the partitions once initialized
    assert first.error_code == 0 and first.member_epoch == 2 and _assigned(first) == {T1: [0, 1]}
    second = _beat(groups, "b", 0, ["t1"])
    assert second.member_epoch == 3 and _assigned(second) == {T1: [0]}
    again = _beat(groups, "a", 2)  # the simple assignor's stickiness: a keeps one of its two partitions
    assert again.member_epoch == 3 and _assigned(again) == {T1: [1]}
    assert _beat(groups, "a", 3).assignment is None  # nothing new: no assignment sent
    third = _beat(groups, "c", 0, ["t1"])  # more members than partitions: partitions shared, a and b keep theirs
    assert _assigned(third) == {T1: [1]}
    assert groups.describe("g", IMAGE).group_epoch == 4


def test_only_initialized_partitions_are_assigned_and_a_lost_initialization_is_asked_again() -> None:
    """Kafka 4.2's initialize flow: a subscribed partition without state is initializing, unassigned; a failed
    initialization is asked again by the next heartbeat, one that never answered only after the retry interval; once
    initialized it is assigned at the next heartbeat (a new group epoch)."""
    groups = ShareGroups(ShareGroupSettings())
    request = ShareGroupHeartbeatRequest(group_id="g", member_id="a", member_epoch=0, subscribed_topic_names=["t1"])
    joined, _ = groups.heartbeat(request, "client", "/127.0.0.1", IMAGE, 0)
    assert (joined.member_epoch, _assigned(joined)) == (1, {})
    state = groups.groups["g"].state_partitions
    assert groups.to_initialize("g", IMAGE, 0, RETRY_MS).partitions == {T1: {0, 1}}
    assert state.initializing == {T1: {0, 1}}
    assert groups.to_initialize("g", IMAGE, RETRY_MS - 1, RETRY_MS).partitions == {}  # asked for, not answered yet
    state.initialize_failed({T1: {1}})
    assert groups.to_initialize("g", IMAGE, 1, RETRY_MS).partitions == {T1: {1}}  # a failure is asked again at once
    assert groups.to_initialize("g", IMAGE, 1 + RETRY_MS, RETRY_MS).partitions == {T1: {0, 1}}  # never answered
    state.initialize_done({T1: {0}})
    beat = _beat(groups, "a", 1)
    assert (beat.member_epoch, _assigned(beat)) == (2, {T1: [0]})
    state.initialize_done({T1: {1}})
    assert state.initializing == {} and state.initialized == {T1: {0, 1}}
    beat = _beat(groups, "a", 2)
    assert (beat.member_epoch, _assigned(beat)) == (3, {T1: [0, 1]})
    assert _beat(groups, "a", 3).assignment is None


def test_a_stale_member_epoch_is_fenced_and_an_unknown_member_refused() -> None:
    groups = ShareGroups(ShareGroupSettings())
    _beat(groups, "a", 0, ["t1"])
    _beat(groups, "b", 0, ["t1"])
    assert _beat(groups, "a", 3).error_code == ErrorCode.FENCED_MEMBER_EPOCH  # a is still at epoch 2
    assert _beat(groups, "z", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert _beat(groups, "z", -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("member,epoch,topics", [("", 0, ["t1"]), ("a", -2, None), ("a", 0, None), ("a", 0, [])])
def test_invalid_heartbeats(member: str, epoch: int, topics: list[str] | None) -> None:
    assert _beat(ShareGroups(ShareGroupSettings()), member, epoch, topics).error_code == ErrorCode.INVALID_REQUEST


def test_leaving_and_session_timeout_remove_members_and_bump_the_epoch() -> None:
    groups = ShareGroups(ShareGroupSettings(session_timeout_ms=45_000))
    _beat(groups, "a", 0, ["t1", "t2"], now=0)
    _beat(groups, "b", 0, ["t2"], now=10_000)
    left = _beat(groups, "b", -1)
    assert left.member_epoch == -1 and set(groups.groups["g"].members) == {"a"}
    assert groups.expire(44_999) == []
    assert groups.expire(45_000) == [("g", "a")]
    assert groups.describe("g", IMAGE).group_state == "Empty"
    assert [g.group_id for g in groups.listed([], ["share"])] == ["g"]
    assert groups.listed([], ["consumer"]) == [] and groups.listed(["stable"], []) == []
    assert groups.delete("g") is ErrorCode.NONE and groups.delete("g") is ErrorCode.GROUP_ID_NOT_FOUND


def test_a_group_with_members_is_not_deleted() -> None:
    groups = ShareGroups(ShareGroupSettings())
    _beat(groups, "a", 0, ["t1"])
    assert groups.delete("g") is ErrorCode.NON_EMPTY_GROUP


def test_a_topic_growing_makes_a_new_assignment() -> None:
    groups = ShareGroups(ShareGroupSettings())
    _beat(groups, "a", 0, ["t1"])
    grown = _beat(groups, "a", 2, image=TopicImage({"t1": (T1, 4)}))  # epoch 3: grown, 4: new ones initialized
    assert grown.member_epoch == 4 and _assigned(grown) == {T1: [0, 1, 2, 3]}


def test_the_group_size_limit() -> None:
    groups = ShareGroups(ShareGroupSettings(max_size=2))
    _beat(groups, "a", 0, ["t1"])
    _beat(groups, "b", 0, ["t1"])
    assert _beat(groups, "c", 0, ["t1"]).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_group_configs_are_bounded_by_the_broker_keys_and_kept_on_disk(tmp_path: Path) -> None:
    configs = ShareConfigs(ShareLimits(), FileGroupConfigStore(str(tmp_path)))
    configs.check("share.record.lock.duration.ms", "15000")
    with pytest.raises(GroupConfigError, match="group.share.min.record.lock.duration.ms"):
        configs.check("share.record.lock.duration.ms", "0")
    with pytest.raises(GroupConfigError, match="group.share.max.record.lock.duration.ms"):
        configs.check("share.record.lock.duration.ms", str(24 * 3600 * 1000))
    with pytest.raises(GroupConfigError, match="Unknown group config"):
        configs.check("share.nonsense", "1")
    with pytest.raises(GroupConfigError):
        configs.check("share.auto.offset.reset", "sometimes")
    asyncio.run(configs.alter("g", {"share.auto.offset.reset": "earliest"}))
    assert configs.auto_offset_reset("g") == ("earliest", 0) and configs.auto_offset_reset("h") == ("latest", 0)
    reopened = ShareConfigs(ShareLimits(), FileGroupConfigStore(str(tmp_path)))
    assert reopened.auto_offset_reset("g") == ("earliest", 0) and list(reopened.store.all()) == ["g"]
    asyncio.run(reopened.forget("g"))
    assert ShareConfigs(ShareLimits(), FileGroupConfigStore(str(tmp_path))).overrides("g") == {}
    assert parse_reset("by_duration:P1DT2H3M4.5S") == ("by_duration", ((26 * 60 + 3) * 60 + 4.5) * 1000)


def test_deleting_takes_every_partition_with_state_and_is_carried_out_again() -> None:
    """A group deletion takes the initialized and initializing partitions, and every partition of a topic an earlier
    deletion left deleting (as far as the topic exists); a topic's offsets deletion its initialized partitions; a topic
    subscribed again leaves deleting; a deleted topic leaves every set."""
    state = StatePartitions()
    state.to_initialize({"t1": (T1, 2), "t2": (T2, 3)}, now_ms=0, retry_ms=RETRY_MS)
    state.initialize_done({T1: {0, 1}, T2: {0}})
    assert state.delete_topic(T1, 2) == {0, 1} and state.deleting == {T1}
    assert state.delete_topic(T1, 2) == {0, 1}  # not finished: all of it again
    assert state.delete_topic(T3, 1) is None  # no state there
    counts = {T1: 2, T2: 3}
    assert state.delete_all(counts.get) == {T1: {0, 1}, T2: {0, 1, 2}}
    assert (state.initializing, state.initialized, state.deleting) == ({}, {}, {T1, T2})
    assert state.to_initialize({"t2": (T2, 3)}, now_ms=1, retry_ms=RETRY_MS).partitions == {T2: {0, 1, 2}}
    assert state.deleting == {T1}
    state.deleted([T1])
    assert state.deleting == set() and state.delete_all(counts.get) == {T2: {0, 1, 2}}
    assert state.topics_deleted([T2]) and not state.topics_deleted([T2])
    assert (state.deleting, state.names) == (set(), {})


def test_partitions_added_to_a_known_topic_start_at_zero_and_a_new_topic_where_auto_offset_reset_says() -> None:
    """KAFKA-20742: a topic new to the group is initialized without a start offset (-1: share.auto.offset.reset
    when first read); partitions added to a topic it already has, initialized or initializing, start at 0, so that
    what is produced to them before they are first read is not skipped. A topic whose state was deleted is new
    again."""
    state = StatePartitions()
    first = state.to_initialize({"t1": (T1, 1)}, now_ms=0, retry_ms=RETRY_MS)
    assert (first.partitions, first.start_offset(T1)) == ({T1: {0}}, -1)
    state.initialize_done(first.partitions)
    grown = state.to_initialize({"t1": (T1, 3), "t2": (T2, 1)}, now_ms=1, retry_ms=RETRY_MS)
    assert grown.partitions == {T1: {1, 2}, T2: {0}}
    assert (grown.start_offset(T1), grown.start_offset(T2)) == (0, -1)
    state.initialize_failed({T1: {2}})  # T1 stays known, T2 (still initializing) is known now
    again = state.to_initialize({"t1": (T1, 3), "t2": (T2, 2)}, now_ms=2, retry_ms=RETRY_MS)
    assert (again.partitions, again.start_offset(T1), again.start_offset(T2)) == ({T1: {2}, T2: {1}}, 0, 0)
    state.initialize_done({T1: {1, 2}, T2: {0, 1}})
    assert state.delete_topic(T1, 3) == {0, 1, 2}
    state.deleted([T1])
    assert state.to_initialize({"t1": (T1, 3)}, now_ms=3, retry_ms=RETRY_MS).start_offset(T1) == -1


def test_records_replay_the_group_and_its_tombstones_delete_it() -> None:
    """What is written for a share group (each change, then the deletion) replays, through the loader's decoding of
    ``__consumer_offsets`` records, into the same group: epochs, members and their assignment, the share-partitions
    with state; a deleted group's tombstones remove it."""
    groups = ShareGroups(ShareGroupSettings())
    log: list[tuple[bytes, bytes | None]] = []
    for member, epoch, topics in [("a", 0, ["t1", "t2"]), ("b", 0, ["t1"]), ("b", -1, None), ("a", 2, None)]:
        _beat(groups, member, epoch, topics)
        log += share_records.changes(groups.groups["g"])
    assert _beat(groups, "a", 4).assignment is None
    assert share_records.changes(groups.groups["g"]) == []  # nothing changed: nothing written
    group = groups.groups["g"]

    def replayed(records: list[tuple[bytes, bytes | None]]) -> dict[str, ShareGroup]:
        loaded: dict[str, ShareGroup] = {}
        loading = ShareLoad(loaded, now_ms=7)
        for key, value in records:
            entry = decode_record(key, value)
            assert isinstance(entry, share_records.ShareGroupEntry)
            loading.apply(entry)
        loading.finish(deadline_ms=99)
        return loaded

    again = replayed(log)["g"]
    state = again.state_partitions
    assert (again.group_epoch, again.assignment_epoch, state.initialized, state.initializing, state.names) == \
        (4, 4, {T1: {0, 1}, T2: {0, 1, 2}}, {}, {T1: "t1", T2: "t2"})
    assert [(m.member_id, m.member_epoch, m.subscribed, m.assignment, m.deadline_ms) for m in again.members.values()] \
        == [("a", 4, ("t1", "t2"), group.members["a"].assignment, 99)]
    assert again.written == group.written  # the next change after a load writes only what changed
    loaded = ShareGroups(ShareGroupSettings(), groups={"g": again})
    assert _beat(loaded, "a", 4).assignment is None and again.group_epoch == 4  # same topics: same assignment

    state = group.state_partitions
    state.to_initialize({"t3": (T3, 1)}, now_ms=5, retry_ms=RETRY_MS)  # asked for, then the coordinator crashed
    state.delete_topic(T2, 3)
    log += share_records.changes(group)
    crashed = replayed(log)["g"].state_partitions
    assert (crashed.initializing, crashed.initializing_since_ms, crashed.initialized, crashed.deleting) == \
        ({T3: {0}}, {T3: 7}, {T1: {0, 1}}, {T2})  # initializing again from the load time on
    _beat(groups, "a", -1)
    log += share_records.changes(group)
    assert groups.delete("g") == ErrorCode.NONE
    tombstones = share_records.changes(group, deleted=True)
    assert all(value is None for _, value in tombstones) and tombstones[-1][0][:2] == b"\x00\x0b"  # metadata last
    assert replayed(log + tombstones) == {}
