"""The group table: every group this coordinator serves, what all of them share, and their states.

Kafka's group coordinator keeps one table of groups of two kinds, each a state machine of its own,
and one offset store that both share (``GroupMetadataManager`` and ``OffsetMetadataManager``):

    kind       module       states (``state.value`` is what ListGroups and DescribeGroups show)
    classic    classic.py   Empty -> PreparingRebalance -> CompletingRebalance -> Stable, Dead
                            (JoinGroup/SyncGroup/Heartbeat/LeaveGroup; the transitions are listed in
                            ``group.py``)
    consumer   consumer.py  Empty, Assigning, Reconciling, Stable, Dead (KIP-848's
                            ConsumerGroupHeartbeat; listed in ``consumer_group.py``)

    offsets    offsets.py   committed and pending offsets of any group (OffsetCommit, TxnOffsetCommit,
                            OffsetFetch, OffsetDelete, retention), held on the group as ``GroupBase``

Every entry point takes ``now_ms`` and returns an ``Outcome``: the answers to deliver (each paired
with the opaque ``Waiter`` its request came with) and the ``__consumer_offsets`` records to persist
*before* those answers go out. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pybroker.coordinator.group_base import GroupBase, Record, Waiter
from pybroker.coordinator.records import offset_key, partition_for

log = logging.getLogger("pybroker.coordinator")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings the coordinator obeys (Kafka's key names in the field docs)."""

    num_partitions: int = 50  # offsets.topic.num.partitions
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    consumer_session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    rebalance_protocols: tuple[str, ...] = ("classic", "consumer")  # group.coordinator.rebalance.protocols
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy
    share_session_timeout_ms: int = 45000  # group.share.session.timeout.ms


@dataclass(slots=True)
class Outcome:
    replies: list[tuple[Waiter, Any]] = field(default_factory=list)
    records: list[tuple[int, Record]] = field(default_factory=list)
    """(partition of __consumer_offsets, record)."""
    staged: list[Any] = field(default_factory=list)
    """OffsetCommit values (``OffsetEntry``) in ``records``: the runtime hands them to
    ``offsets_written`` once the records are replicated, or to ``offsets_failed`` if they are not."""
    tasks: list[Any] = field(default_factory=list)
    """Work for off the loop (``consumer_regex.RegexRefresh``): the runtime runs it and hands the
    result back to ``regexes_resolved``."""

    def reply(self, waiter: Waiter, response: Any) -> None:
        self.replies.append((waiter, response))


class GroupTable:
    """The groups of every loaded ``__consumer_offsets`` partition, of either kind."""

    def __init__(self, config: GroupConfig) -> None:
        self.config = config
        self.groups: dict[str, Any] = {}
        """group id -> ``Group`` (classic) or ``ConsumerGroup``, both ``GroupBase``."""

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def delete_group(self, out: Outcome, group: GroupBase, now_ms: int) -> None:
        """Drop a group and its offsets, with their tombstones (Kafka's deleteGroup)."""
        partition = self.partition_of(group.group_id)
        for topic, index in group.offsets:
            out.records.append((partition, (offset_key(group.group_id, topic, index), None)))
        group.offsets.clear()
        group.pending_offsets.clear()
        group.offset_positions.clear()
        out.records.extend((partition, record) for record in group.tombstones())
        group.mark_dead(now_ms)
        log.info("Group %s transitioned to Dead", group.group_id)
        del self.groups[group.group_id]
