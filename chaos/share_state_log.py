"""What the share coordinator stored for the share workload's group, read from the stopped brokers'
``__share_group_state`` logs after a round.

A record can be delivered where the history cannot see it: a member's consumer fetches in the background, so a
record it acquired just before it was killed never reached the application. When such unseen acquisitions use up
the delivery limit, the share-partition's leader archives the record (Kafka's SharePartition does the same when
the last lock times out) and no member is offered it again. The share checker would then find the record neither
acknowledged nor delivered up to the limit; the coordinator's log says it was archived. ``archived`` gives those
records as ``share-archived`` events for the checker, which explains a record with them only under the conditions
it states (share_checker.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.replicas import partition_dirs, segment_files
from pybroker.coordinator.share_state.records import decode_state_record
from pybroker.records import iter_batches
from pybroker.replication.share.partition import RecordState

STATE_TOPIC = "__share_group_state"


def archived(root: Path, group: str) -> list[dict[str, Any]]:
    """Each state batch of ``group`` the coordinator stored as archived, as ``share-archived`` events (partition,
    first and last offset, delivery count), deduplicated. Each ``__share_group_state`` partition is read from the
    replica with the most records: replicas converge once the round healed, and a shorter one was truncated."""
    found: set[tuple[int, int, int, int]] = set()
    for (topic, _), replicas in sorted(partition_dirs(root).items()):
        if topic != STATE_TOPIC:
            continue
        logs = [_records(directory) for directory in replicas.values()]
        for raw_key, raw_value in max(logs, key=len, default=[]):
            entry = decode_state_record(raw_key, raw_value)
            if entry is None or entry.state is None or entry.key.group_id != group:
                continue
            found.update((entry.key.partition, b.first_offset, b.last_offset, b.delivery_count)
                         for b in entry.state.batches if b.delivery_state == RecordState.ARCHIVED)
    return [{"type": "share-archived", "partition": partition, "first": first, "last": last, "dc": dc}
            for partition, first, last, dc in sorted(found)]


def _records(directory: Path) -> list[tuple[bytes, bytes | None]]:
    """The keyed records of a partition's segments, in offset order."""
    records = []
    for segment in segment_files(directory):
        for batch in iter_batches(segment.read_bytes()):
            if batch.is_control:
                continue
            records += [(bytes(r.key), None if r.value is None else bytes(r.value))
                        for r in batch.records() if r.key is not None]
    return records
