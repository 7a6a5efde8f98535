"""The share coordinator's state of its share-partitions, as a pure state machine (Kafka's ShareCoordinatorShard).

Each operation checks a request for one share-partition and returns its answer with the records to append to
``__share_group_state``; the records are applied here at once (``replay``), as the caller appends them in the same
step, and a load replays the partition's log through the same ``replay``. The rules are Kafka 4.2's:

- InitializeShareGroupState sets a share-partition's state epoch and start offset; an epoch not above the one held
  is FENCED_STATE_EPOCH.
- ReadShareGroupState and WriteShareGroupState of a share-partition never initialized are INVALID_REQUEST; a read
  with a leader epoch below the one held is FENCED_LEADER_EPOCH, and a higher one is recorded (an update record),
  which fences the writes of the previous leader (FENCED_LEADER_EPOCH) as a lower state epoch is fenced with
  FENCED_STATE_EPOCH.
- A write is stored as a ShareUpdate record; after ``share.coordinator.snapshot.update.records.per.snapshot``
  updates the merged state is written whole as a ShareSnapshot, so a load merges a bounded number of updates.
- DeleteShareGroupState writes a tombstone and forgets the share-partition.

State is bounded: a write whose state batches are malformed, or that would leave more than ``max_state_batches``
batches, is INVALID_REQUEST and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from pybroker.coordinator.records import Record
from pybroker.coordinator.share_state.records import (
    SNAPSHOT_TYPE,
    ShareKey,
    ShareState,
    StateBatch,
    StateEntry,
    combine,
    decode_state_record,
    snapshot_record,
    tombstones,
    update_record,
)
from pybroker.protocol.error_codes import ErrorCode

__all__ = ["Answer", "ShareStateShard", "decode_state_record"]

UNINITIALIZED_START_OFFSET = -1
DEFAULT_STATE_EPOCH = 0
VALID_DELIVERY_STATES = frozenset({0, 2, 4})
"""Available, acknowledged, archived: what a state batch may hold (acquisition is never durable)."""
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."


@dataclass(slots=True)
class Answer:
    """One share-partition's answer, and the records that make it durable."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    state: ShareState | None = None
    records: list[Record] = field(default_factory=list)


def _refused(error: ErrorCode, message: str | None = None) -> Answer:
    return Answer(error, message if message is not None else error.message)


@dataclass(slots=True)
class _Held:
    state: ShareState
    updates: int = 0
    """ShareUpdate records since the last ShareSnapshot."""
    fenced_leader_epoch: int = -1


class ShareStateShard:
    """The share-partitions whose keys hash to the internal-topic partitions this broker leads."""

    def __init__(self, *, updates_per_snapshot: int, max_state_batches: int) -> None:
        self.updates_per_snapshot = updates_per_snapshot
        self.max_state_batches = max_state_batches
        self.states: dict[ShareKey, _Held] = {}

    # ------------------------------------------------------------------ operations

    def initialize(self, key: ShareKey, state_epoch: int, start_offset: int, now_ms: int) -> Answer:
        if key.partition < 0 or state_epoch < 0:
            return _refused(ErrorCode.INVALID_REQUEST)
        held = self.states.get(key)
        if held is not None and held.state.state_epoch >= state_epoch:
            return _refused(ErrorCode.FENCED_STATE_EPOCH)
        state = ShareState(snapshot_epoch=0 if held is None else held.state.snapshot_epoch + 1,
                           state_epoch=state_epoch, leader_epoch=-1, start_offset=start_offset, batches=[],
                           create_ms=now_ms, write_ms=now_ms)
        return self._append(key, snapshot_record(key, state))

    def read(self, key: ShareKey, leader_epoch: int) -> Answer:
        """The state; a higher leader epoch is recorded first (it fences the previous leader's writes)."""
        if key.partition < 0:
            return _refused(ErrorCode.INVALID_REQUEST)
        held = self.states.get(key)
        if held is None:
            return _refused(ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED)
        if leader_epoch != -1 and held.fenced_leader_epoch > leader_epoch:
            return _refused(ErrorCode.FENCED_LEADER_EPOCH)
        answer = Answer(state=held.state)
        if leader_epoch > held.fenced_leader_epoch:
            record = update_record(key, held.state.snapshot_epoch, leader_epoch, -1, [])
            answer.records = self._append(key, record).records
        return answer

    def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: list[StateBatch], now_ms: int) -> Answer:
        if key.partition < 0 or any(b.first_offset < 0 or b.last_offset < b.first_offset
                                    or b.delivery_state not in VALID_DELIVERY_STATES or b.delivery_count < 0
                                    for b in batches):
            return _refused(ErrorCode.INVALID_REQUEST)
        held = self.states.get(key)
        if held is None:
            return _refused(ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED)
        if held.fenced_leader_epoch > leader_epoch:
            return _refused(ErrorCode.FENCED_LEADER_EPOCH)
        if held.state.state_epoch > state_epoch:
            return _refused(ErrorCode.FENCED_STATE_EPOCH)
        too_many = _refused(ErrorCode.INVALID_REQUEST,
                            f"A share-partition's state holds at most {self.max_state_batches} state batches.")
        if len(batches) > self.max_state_batches:
            return too_many
        new_start = held.state.start_offset if start_offset == -1 else start_offset
        merged = combine(held.state.batches, batches, new_start)
        if len(merged) > self.max_state_batches:
            return too_many
        if held.updates >= self.updates_per_snapshot:
            state = ShareState(held.state.snapshot_epoch + 1, held.state.state_epoch,
                               max(leader_epoch, held.state.leader_epoch), new_start, merged, held.state.create_ms,
                               now_ms)
            return self._append(key, snapshot_record(key, state))
        return self._append(key, update_record(key, held.state.snapshot_epoch, leader_epoch, start_offset, batches))

    def snapshot(self, key: ShareKey, now_ms: int) -> Answer:
        """The share-partition's state written again whole, so that the records before it become redundant (Kafka's
        cold-partition snapshot); nothing for a share-partition deleted meanwhile."""
        held = self.states.get(key)
        if held is None:
            return Answer()
        state = held.state
        return self._append(key, snapshot_record(key, ShareState(
            state.snapshot_epoch + 1, state.state_epoch, max(state.leader_epoch, held.fenced_leader_epoch),
            state.start_offset, state.batches, state.create_ms, now_ms)))

    def cold(self, older_than_ms: int) -> list[ShareKey]:
        """The share-partitions whose last snapshot was written before ``older_than_ms``."""
        return [key for key, held in self.states.items() if held.state.write_ms < older_than_ms]

    def delete(self, key: ShareKey) -> Answer:
        if key.partition < 0:
            return _refused(ErrorCode.INVALID_REQUEST)
        if key not in self.states:
            return Answer()
        answer = Answer(records=tombstones(key))
        self.states.pop(key)
        return answer

    def summary(self, key: ShareKey) -> Answer:
        """ReadShareGroupStateSummary: the state without its batches, and nothing recorded."""
        if key.partition < 0:
            return _refused(ErrorCode.INVALID_REQUEST)
        held = self.states.get(key)
        if held is None:
            return Answer(state=ShareState(-1, DEFAULT_STATE_EPOCH, -1, UNINITIALIZED_START_OFFSET))
        return Answer(state=held.state)

    def saved(self, key: ShareKey) -> _Held | None:
        """What the shard holds of ``key`` now, for ``restore`` (the records of an operation are applied at once)."""
        held = self.states.get(key)
        return None if held is None else replace(held)

    def restore(self, key: ShareKey, saved: _Held | None) -> None:
        """Undo an operation whose records were not appended: the shard holds of ``key`` what the log holds."""
        if saved is None:
            self.states.pop(key, None)
        else:
            self.states[key] = saved

    # ------------------------------------------------------------------ replay

    def replay(self, entries: list[StateEntry]) -> None:
        for entry in entries:
            self._apply(entry)

    def drop(self, unloaded: Callable[[ShareKey], bool]) -> None:
        """Forget the share-partitions whose internal-topic partition was unloaded."""
        for key in [key for key in self.states if unloaded(key)]:
            del self.states[key]

    def _append(self, key: ShareKey, record: Record) -> Answer:
        raw_key, raw_value = record
        entry = decode_state_record(raw_key, raw_value)
        assert entry is not None
        self._apply(entry)
        held = self.states.get(key)
        return Answer(state=held.state if held is not None else None, records=[record])

    def _apply(self, entry: StateEntry) -> None:
        if entry.state is None:
            self.states.pop(entry.key, None)
            return
        held = self.states.get(entry.key)
        new = entry.state
        if entry.record_type == SNAPSHOT_TYPE:
            fenced = max(new.leader_epoch, held.fenced_leader_epoch if held is not None else -1)
            self.states[entry.key] = _Held(new, 0, fenced)
            return
        if held is None:  # an update without its snapshot (compacted away by a deletion): not a state
            return
        start = held.state.start_offset if new.start_offset == -1 else new.start_offset
        leader_epoch = held.state.leader_epoch if new.leader_epoch == -1 else new.leader_epoch
        held.state = ShareState(held.state.snapshot_epoch, held.state.state_epoch, leader_epoch, start,
                                combine(held.state.batches, new.batches, start), held.state.create_ms,
                                held.state.write_ms)
        held.updates += 1
        held.fenced_leader_epoch = max(held.fenced_leader_epoch, new.leader_epoch)
