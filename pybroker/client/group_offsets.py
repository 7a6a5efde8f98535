"""A consumer group's offsets beside its partitions' log ends (the lag view of ``consumer-groups --describe``
and of the web console), and the group states in which its offsets may be reset."""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.client.admin import AdminClient, OffsetSpec
from pybroker.client.cluster import KafkaClient
from pybroker.client.groups import GroupAdmin, GroupDescription

__all__ = ["INACTIVE_STATES", "OffsetRow", "offset_rows"]

#: A group in these states has no members, so its committed offsets may be changed (Kafka's rule).
INACTIVE_STATES = ("Empty", "Dead")


@dataclass(frozen=True, slots=True)
class OffsetRow:
    group: str
    topic: str
    partition: int
    current: int | None
    log_end: int | None
    consumer_id: str | None = None
    host: str | None = None
    client_id: str | None = None

    @property
    def lag(self) -> int | None:
        return None if self.current is None or self.log_end is None else max(self.log_end - self.current, 0)


async def offset_rows(client: KafkaClient, admin: GroupAdmin, group: GroupDescription) -> list[OffsetRow]:
    """Assigned partitions first (by member), then committed partitions no member owns."""
    committed = await admin.committed_offsets(group.group_id)
    owners = {tp: m for m in group.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owners), key=lambda tp: (tp.topic, tp.partition))
    listed = await AdminClient(client).list_offsets({tp: OffsetSpec.LATEST for tp in partitions})
    rows = []
    for tp in partitions:
        member = owners.get(tp)
        log_end = listed[tp].offset if tp in listed and listed[tp].error is None else None
        rows.append(OffsetRow(group.group_id, tp.topic, tp.partition, committed.get(tp), log_end,
                              *((member.member_id, member.host, member.client_id) if member else ())))
    return sorted(rows, key=lambda r: r.consumer_id is None)
