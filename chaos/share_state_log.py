"""What the share coordinator stored for the share workload's group, read from the stopped brokers'
``__share_group_state`` logs after a round.

A record can be delivered where the history cannot see it: a member's consumer fetches in the background, so a
record it acquired just before it was killed never reached the application. When such unseen acquisitions use up
the delivery limit, the share-partition's leader archives the record (Kafka's SharePartition does the same when
the last lock times out) and no member is offered it again. The share checker would then find the record neither
acknowledged nor delivered up to the limit; the coordinator's log says it was archived. ``archived`` gives those
records as ``share-archived`` events for the checker, which explains a record with them only under the conditions
it states (share_checker.py).

The log does not always store the archiving itself: when the archived record was the first in flight, the write
that follows moves the start offset past it (and past whatever after it was done) and carries no batch for it.
``passed`` gives such records as ``share-passed`` events: offsets the start offset passed while their last stored
state was still available (how an acquisition is stored: with the count before it), with that count and how long
it had been stored when the start offset passed them (chaos seed 8001: stored available after two deliveries,
passed 3.05 s later, one lock duration after a member that was then killed took it a third time).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from chaos.replicas import partition_dirs, segment_files
from pybroker.coordinator.share_state.records import SNAPSHOT_TYPE, StateBatch, combine, decode_state_record
from pybroker.records import iter_batches
from pybroker.replication.share.partition import RecordState

STATE_TOPIC = "__share_group_state"

_Partition = tuple[uuid.UUID, int]
"""A share-partition of the group: topic id, partition."""
_Stored = tuple[bytes, bytes | None, int]
"""A keyed record of the log: key, value (None for a tombstone), timestamp (ms)."""


def archived(root: Path, group: str) -> list[dict[str, Any]]:
    """Each state batch of ``group`` the coordinator stored as archived, as ``share-archived`` events (partition,
    first and last offset, delivery count), deduplicated."""
    found: set[tuple[int, int, int, int]] = set()
    for raw_key, raw_value, _ in _longest_logs(root):
        entry = decode_state_record(raw_key, raw_value)
        if entry is None or entry.state is None or entry.key.group_id != group:
            continue
        found.update((entry.key.partition, b.first_offset, b.last_offset, b.delivery_count)
                     for b in entry.state.batches if b.delivery_state == RecordState.ARCHIVED)
    return [{"type": "share-archived", "partition": partition, "first": first, "last": last, "dc": dc}
            for partition, first, last, dc in sorted(found)]


def passed(root: Path, group: str) -> list[dict[str, Any]]:
    """The offsets of ``group`` the start offset passed while their last stored state was available, as
    ``share-passed`` events (partition, first and last offset, their stored delivery count, and ``held_ms``: from
    the first write that stored them available with that count to the write that passed them), the coordinator's
    state replayed as it merges it (a snapshot replaces the state, an update is combined into it)."""
    states: dict[_Partition, tuple[int, list[StateBatch]]] = {}
    since: dict[_Partition, dict[int, tuple[int, int]]] = {}
    """Per share-partition, each offset stored available: (its count, when first stored with it)."""
    found: list[tuple[int, int, int, int]] = []
    for raw_key, raw_value, timestamp in _longest_logs(root):
        entry = decode_state_record(raw_key, raw_value)
        if entry is None or entry.key.group_id != group:
            continue
        key = (entry.key.topic_id, entry.key.partition)
        if entry.state is None:
            states.pop(key, None)
            since.pop(key, None)
            continue
        held = states.get(key)
        if entry.record_type == SNAPSHOT_TYPE:
            start, batches = entry.state.start_offset, entry.state.batches
        elif held is None:  # an update without its snapshot: not a state (as the coordinator replays it)
            continue
        else:
            start = held[0] if entry.state.start_offset == -1 else entry.state.start_offset
            batches = combine(held[1], entry.state.batches, start)
        states[key] = (start, batches)
        before = since.get(key, {})
        since[key] = _stored_available(batches, before, timestamp)
        found += [(key[1], offset, dc, timestamp - stored) for offset, (dc, stored) in before.items()
                  if offset < start]
    return [{"type": "share-passed", "partition": partition, "first": first, "last": last, "dc": dc,
             "held_ms": held_ms} for partition, first, last, dc, held_ms in _runs(sorted(found))]


def _stored_available(batches: list[StateBatch], before: dict[int, tuple[int, int]], timestamp: int
                      ) -> dict[int, tuple[int, int]]:
    """Each offset ``batches`` store as available: its count, and when it was first stored with it (``before``
    holds that of the previous state, ``timestamp`` is this write's)."""
    now: dict[int, tuple[int, int]] = {}
    for batch in batches:
        if batch.delivery_state != RecordState.AVAILABLE:
            continue
        for offset in range(batch.first_offset, batch.last_offset + 1):
            kept = before.get(offset)
            now[offset] = kept if kept is not None and kept[0] == batch.delivery_count \
                else (batch.delivery_count, timestamp)
    return now


def _runs(found: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int, int]]:
    """Consecutive offsets of one partition with one count and one ``held_ms`` as one range."""
    runs: list[tuple[int, int, int, int, int]] = []
    for partition, offset, dc, held_ms in found:
        if runs and runs[-1][0] == partition and runs[-1][2] + 1 == offset and runs[-1][3:] == (dc, held_ms):
            runs[-1] = (partition, runs[-1][1], offset, dc, held_ms)
        else:
            runs.append((partition, offset, offset, dc, held_ms))
    return runs


def _longest_logs(root: Path) -> list[_Stored]:
    """The keyed records of every ``__share_group_state`` partition, each read from the replica with the most
    records: replicas converge once the round healed, and a shorter one was truncated."""
    records: list[_Stored] = []
    for (topic, _), replicas in sorted(partition_dirs(root).items()):
        if topic == STATE_TOPIC:
            longest: list[_Stored] = max((_records(directory) for directory in replicas.values()), key=len)
            records += longest
    return records


def _records(directory: Path) -> list[_Stored]:
    """The keyed records of a partition's segments, in offset order."""
    records = []
    for segment in segment_files(directory):
        for batch in iter_batches(segment.read_bytes()):
            if batch.is_control:
                continue
            records += [(bytes(r.key), None if r.value is None else bytes(r.value), r.timestamp)
                        for r in batch.records() if r.key is not None]
    return records
