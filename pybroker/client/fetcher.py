"""Fetch over the wire: one sessionless Fetch per leader, batches decoded into records.

With ``read_committed`` the broker stops at the last stable offset and lists aborted transactions;
records of those are dropped here, as Kafka's consumer does (the abort marker ends each range).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError
from pybroker.client.metadata import TopicLayout, topic_layouts
from pybroker.common.topic import TopicPartition
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.records import ControlRecordType, TimestampType, iter_batches, parse_control_key
from pybroker.records.record import Header

MIN_FETCH_VERSION = 4  # magic v2 batches and isolation level
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What one partition returned: its records from the asked offset and where to fetch next."""

    records: list[ConsumerRecord]
    next_offset: int
    high_watermark: int = -1
    error: ResponseError | None = None


@dataclass(frozen=True, slots=True)
class FetchSettings:
    isolation_level: int = READ_UNCOMMITTED
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52428800  # Kafka's fetch.max.bytes default
    partition_max_bytes: int = 1048576  # max.partition.fetch.bytes default


class Fetcher:
    """Reads records at given positions from the partition leaders."""

    def __init__(self, client: KafkaClient, settings: FetchSettings = FetchSettings()) -> None:
        self.client = client
        self.settings = settings
        self._layouts: dict[str, TopicLayout] = {}

    async def layouts(self, topics: Sequence[str]) -> dict[str, TopicLayout]:
        missing = sorted({t for t in topics if t not in self._layouts})
        if missing:
            self._layouts.update(await topic_layouts(self.client, missing))
        return {t: self._layouts[t] for t in topics}

    async def fetch(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, PartitionFetch]:
        """One round of Fetch requests; partitions without a leader come back with an error."""
        layouts = await self.layouts(sorted({tp.topic for tp in positions}))
        by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        results: dict[TopicPartition, PartitionFetch] = {}
        for tp, offset in positions.items():
            leaders = layouts[tp.topic].leaders
            leader = leaders[tp.partition] if 0 <= tp.partition < len(leaders) else None
            if leader is None:
                code = ErrorCode.LEADER_NOT_AVAILABLE if tp.partition < len(leaders) \
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results[tp] = PartitionFetch([], offset, error=ResponseError(code))
            else:
                by_leader[leader][tp] = offset
        for leader, leader_positions in by_leader.items():
            results.update(await self._fetch_from(leader, leader_positions, layouts))
        return results

    async def _fetch_from(self, leader: int, positions: Mapping[TopicPartition, int],
                          layouts: Mapping[str, TopicLayout]) -> dict[TopicPartition, PartitionFetch]:
        settings = self.settings
        by_topic: dict[str, list[FetchRequest.FetchPartition]] = defaultdict(list)
        for tp, offset in positions.items():
            by_topic[tp.topic].append(FetchRequest.FetchPartition(
                partition=tp.partition, fetch_offset=offset, partition_max_bytes=settings.partition_max_bytes))
        request = FetchRequest(
            replica_id=-1, max_wait_ms=settings.max_wait_ms, min_bytes=settings.min_bytes,
            max_bytes=settings.max_bytes, isolation_level=settings.isolation_level, session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=name, topic_id=layouts[name].topic_id, partitions=parts)
                    for name, parts in by_topic.items()])
        connection = await self.client.node(leader)
        response = await connection.send(request, FetchResponse, min_version=MIN_FETCH_VERSION,
                                         timeout=settings.max_wait_ms / 1000 + self.client.timeout)
        if response.error_code != ErrorCode.NONE:
            raise ResponseError(response.error_code)
        names_by_id: dict[uuid.UUID, str] = {layout.topic_id: name for name, layout in layouts.items()}
        results = {}
        for topic in response.responses:
            name = topic.topic or names_by_id.get(topic.topic_id, "")
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                if tp not in positions:
                    continue
                if p.error_code != ErrorCode.NONE:
                    if p.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_ID):
                        self._layouts.pop(name, None)
                    results[tp] = PartitionFetch([], positions[tp], p.high_watermark,
                                                 ResponseError(p.error_code))
                    continue
                results[tp] = decode_partition(tp, positions[tp], p)
        return results


def decode_partition(tp: TopicPartition, fetch_offset: int, data: FetchResponse.PartitionData) -> PartitionFetch:
    """The records at or after ``fetch_offset`` of one partition's answer, aborted transactions left out."""
    aborted = sorted((a.first_offset, a.producer_id) for a in data.aborted_transactions or ())
    aborting: set[int] = set()
    records: list[ConsumerRecord] = []
    next_offset = fetch_offset
    # A decoded answer holds bytes or None: a Spliced file range is only ever sent.
    received = data.records if isinstance(data.records, (bytes, bytearray, memoryview)) else b""
    for batch in iter_batches(received):
        while aborted and aborted[0][0] <= batch.last_offset:
            aborting.add(aborted.pop(0)[1])
        next_offset = max(next_offset, batch.next_offset)
        if batch.is_control:
            for record in batch.records():
                if parse_control_key(record.key)[1] == ControlRecordType.ABORT:
                    aborting.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in aborting:
            continue
        timestamp_type = batch.timestamp_type
        records.extend(ConsumerRecord(tp.topic, tp.partition, r.offset, r.timestamp, timestamp_type, r.key, r.value,
                                      r.headers)
                       for r in batch.records() if r.offset >= fetch_offset)
    return PartitionFetch(records, next_offset, data.high_watermark)
