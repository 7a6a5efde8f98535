"""The share coordinator's state machine: Kafka 4.2's rules for Initialize/Read/Write/Delete/Summary and the
records it writes, replayed into a fresh shard as a load would."""

from __future__ import annotations

import uuid

from pybroker.coordinator.share_state.records import (
    ShareKey,
    StateBatch,
    combine,
    decode_state_record,
    parse_share_key,
    partition_of,
)
from pybroker.coordinator.share_state.shard import ShareStateShard
from pybroker.protocol.error_codes import ErrorCode

KEY = ShareKey("workers", uuid.UUID(int=0x1234), 0)


def shard(updates_per_snapshot: int = 500, max_batches: int = 100) -> ShareStateShard:
    return ShareStateShard(updates_per_snapshot=updates_per_snapshot, max_state_batches=max_batches)


def replayed(records: list[tuple[bytes, bytes | None]], **kwargs: int) -> ShareStateShard:
    fresh = shard(**kwargs)
    fresh.replay([entry for k, v in records if (entry := decode_state_record(k, v)) is not None])
    return fresh


def test_read_and_write_of_an_uninitialized_share_partition_are_invalid_request() -> None:
    s = shard()
    read = s.read(KEY, 0)
    assert read.error is ErrorCode.INVALID_REQUEST and read.message == \
        "Read operation on uninitialized share partition not allowed."
    write = s.write(KEY, 0, 0, 10, [], 1)
    assert write.error is ErrorCode.INVALID_REQUEST and not write.records
    assert s.summary(KEY).state is not None and s.summary(KEY).state.start_offset == -1  # type: ignore[union-attr]


def test_writes_merge_and_survive_a_replay_with_snapshots_every_n_updates() -> None:
    s = shard(updates_per_snapshot=2)
    log = s.initialize(KEY, 1, 5, 1).records
    log += s.read(KEY, 3).records  # leader epoch 3 recorded
    log += s.write(KEY, 1, 3, 5, [StateBatch(5, 9, 0, 1), StateBatch(10, 14, 2, 1)], 2).records
    log += s.write(KEY, 1, 3, -1, [StateBatch(7, 8, 4, 2)], 3).records
    log += s.write(KEY, 1, 3, 10, [StateBatch(15, 15, 2, 1)], 4).records  # the third update: a snapshot
    expected = [StateBatch(10, 15, 2, 1)]
    assert s.states[KEY].state.batches == expected and s.states[KEY].state.start_offset == 10
    loaded = replayed(log, updates_per_snapshot=2)
    answer = loaded.read(KEY, 3)
    assert answer.error is ErrorCode.NONE and answer.state is not None
    assert (answer.state.start_offset, answer.state.state_epoch, answer.state.batches) == (10, 1, expected)


def test_stale_epochs_are_fenced() -> None:
    s = shard()
    s.initialize(KEY, 2, 0, 1)
    s.read(KEY, 5)
    assert s.write(KEY, 2, 4, 0, [], 2).error is ErrorCode.FENCED_LEADER_EPOCH
    assert s.write(KEY, 1, 5, 0, [], 2).error is ErrorCode.FENCED_STATE_EPOCH
    assert s.read(KEY, 4).error is ErrorCode.FENCED_LEADER_EPOCH
    assert s.initialize(KEY, 2, 0, 3).error is ErrorCode.FENCED_STATE_EPOCH
    assert s.write(KEY, 2, 5, 0, [], 2).error is ErrorCode.NONE
    assert not s.read(KEY, 5).records  # nothing recorded for an epoch already held


def test_malformed_or_oversized_state_batches_change_nothing() -> None:
    s = shard(max_batches=3)
    s.initialize(KEY, 0, 0, 1)
    before = list(s.states[KEY].state.batches)
    assert s.write(KEY, 0, 0, 0, [StateBatch(5, 4, 0, 1)], 2).error is ErrorCode.INVALID_REQUEST
    assert s.write(KEY, 0, 0, 0, [StateBatch(0, 0, 1, 1)], 2).error is ErrorCode.INVALID_REQUEST  # acquired
    alternating = [StateBatch(i, i, 2 if i % 2 else 4, 1) for i in range(4)]
    assert s.write(KEY, 0, 0, 0, alternating, 2).error is ErrorCode.INVALID_REQUEST
    assert s.states[KEY].state.batches == before


def test_delete_writes_a_tombstone() -> None:
    s = shard()
    log = s.initialize(KEY, 0, 0, 1).records
    deleted = s.delete(KEY)
    assert deleted.records == [(deleted.records[0][0], None)]
    assert replayed(log + deleted.records).states == {}


def test_combine_overrides_overlaps_and_drops_below_start() -> None:
    merged = combine([StateBatch(0, 9, 0, 1)], [StateBatch(3, 4, 2, 1), StateBatch(8, 12, 4, 3)], 2)
    assert merged == [StateBatch(2, 2, 0, 1), StateBatch(3, 4, 2, 1), StateBatch(5, 7, 0, 1), StateBatch(8, 12, 4, 3)]


def test_coordinator_key_is_kafkas() -> None:
    text = KEY.coordinator_key()
    assert text == "workers:AAAAAAAAAAAAAAAAAAASNA:0"
    assert parse_share_key(text) == KEY
    assert parse_share_key("workers:nope:0") is None and parse_share_key("g:AAAAAAAAAAAAAAAAAAASNA:-1") is None
    assert 0 <= partition_of(KEY, 50) < 50


def test_combine_of_overlapping_new_batches_lets_the_later_start_win() -> None:
    merged = combine([], [StateBatch(0, 9, 0, 1), StateBatch(3, 4, 2, 1), StateBatch(4, 6, 4, 2)], 0)
    assert merged == [StateBatch(0, 2, 0, 1), StateBatch(3, 3, 2, 1), StateBatch(4, 6, 4, 2), StateBatch(7, 9, 0, 1)]


def test_a_cold_snapshot_rewrites_the_merged_state_and_replays_to_it() -> None:
    s = shard()
    records = list(s.initialize(KEY, 0, 5, now_ms=100).records)
    records += s.write(KEY, 0, 3, -1, [StateBatch(5, 6, 2, 1)], now_ms=200).records
    assert s.cold(older_than_ms=100) == [] and s.cold(older_than_ms=101) == [KEY]
    cold = s.snapshot(KEY, now_ms=900)
    assert cold.error is ErrorCode.NONE and len(cold.records) == 1
    assert s.cold(older_than_ms=900) == []
    state = replayed([cold.records[0]]).states[KEY].state  # the snapshot alone holds the whole state
    assert (state.start_offset, state.leader_epoch, state.batches, state.write_ms) == (5, 3, [StateBatch(5, 6, 2, 1)],
                                                                                       900)
    assert shard().snapshot(KEY, now_ms=1).records == []  # deleted meanwhile: nothing written


def test_an_operation_not_appended_is_undone() -> None:
    s = shard()
    s.initialize(KEY, 0, 5, now_ms=1)
    saved = s.saved(KEY)
    assert s.write(KEY, 0, 0, -1, [StateBatch(5, 5, 2, 1)], now_ms=2).error is ErrorCode.NONE
    s.restore(KEY, saved)
    assert s.states[KEY].state.batches == [] and s.states[KEY].updates == 0
    other = ShareKey("other", KEY.topic_id, 0)
    s.initialize(other, 0, 0, now_ms=3)
    s.restore(other, None)  # its initialization was not appended: it has no state
    assert other not in s.states
