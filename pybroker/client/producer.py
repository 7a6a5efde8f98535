"""Produce over the wire: record batches built with :mod:`pybroker.records`, one request per leader.

Keys choose partitions as Kafka's default partitioner does (murmur2 of the key modulo the partition
count), so a key lands on the same partition whichever client wrote it. Records without a key go to
one partition per call, rotating between calls (the spirit of Kafka's sticky partitioner).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError
from pybroker.client.metadata import TopicLayout, topic_layout
from pybroker.common.topic import TopicPartition
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.records import Compression, RecordInput, build_batch

MIN_PRODUCE_VERSION = 3  # magic v2 batches; Kafka 4 brokers reject older versions
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
_MASK32 = 0xFFFFFFFF
_MURMUR_M = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (seed 0x9747b28c) as an unsigned 32-bit value."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK32
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _MURMUR_M) & _MASK32
        k ^= k >> 24
        k = (k * _MURMUR_M) & _MASK32
        h = ((h * _MURMUR_M) & _MASK32) ^ k
    tail = length & ~3
    remaining = length % 4
    if remaining == 3:
        h ^= data[tail + 2] << 16
    if remaining >= 2:
        h ^= data[tail + 1] << 8
    if remaining >= 1:
        h ^= data[tail]
        h = (h * _MURMUR_M) & _MASK32
    h ^= h >> 13
    h = (h * _MURMUR_M) & _MASK32
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's `BuiltInPartitioner.partitionForKey`: `toPositive(murmur2(key)) % partitions`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def parse_acks(text: str) -> int:
    """`all`, `-1`, `0` or `1` as the Produce `acks` field; ValueError otherwise."""
    try:
        return ACKS[text.strip().lower()]
    except KeyError:
        raise ValueError(f"Invalid value {text} for acks: must be one of all, -1, 0, 1") from None


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Where one partition's batch was written; ``base_offset`` is -1 with acks=0 or on error."""

    base_offset: int
    error: ResponseError | None = None


class Producer:
    """Sends records to partition leaders; one batch per partition per call."""

    def __init__(self, client: KafkaClient, *, acks: int = -1, compression: Compression = Compression.NONE,
                 timeout_ms: int = 30000, auto_create_topics: bool = True) -> None:
        self.client = client
        self.auto_create_topics = auto_create_topics
        self.acks = acks
        self.compression = compression
        self.timeout_ms = timeout_ms
        self._layouts: dict[str, TopicLayout] = {}
        self._unkeyed_turn = itertools.count()

    async def layout(self, topic: str) -> TopicLayout:
        if topic not in self._layouts:
            self._layouts[topic] = await topic_layout(self.client, topic, auto_create=self.auto_create_topics)
        return self._layouts[topic]

    async def partition_records(self, topic: str, records: Sequence[RecordInput]
                                ) -> dict[TopicPartition, list[RecordInput]]:
        """Split records by partition: keyed ones by murmur2, unkeyed ones all to this call's partition."""
        count = len((await self.layout(topic)).leaders)
        unkeyed = next(self._unkeyed_turn) % count
        split: dict[TopicPartition, list[RecordInput]] = defaultdict(list)
        for record in records:
            partition = unkeyed if record.key is None else partition_for_key(record.key, count)
            split[TopicPartition(topic, partition)].append(record)
        return split

    async def send(self, batches: Mapping[TopicPartition, Sequence[RecordInput]]
                   ) -> dict[TopicPartition, ProduceResult]:
        """Write each partition's records as one batch; per-partition results (errors are not raised)."""
        by_leader: dict[int, dict[TopicPartition, bytes]] = defaultdict(dict)
        results: dict[TopicPartition, ProduceResult] = {}
        for tp, records in batches.items():
            leaders = (await self.layout(tp.topic)).leaders
            leader = leaders[tp.partition] if 0 <= tp.partition < len(leaders) else None
            if leader is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp.partition >= len(leaders) \
                    else ErrorCode.LEADER_NOT_AVAILABLE
                results[tp] = ProduceResult(-1, ResponseError(code))
            elif records:
                by_leader[leader][tp] = build_batch(records, compression=self.compression)
        for leader, partition_batches in by_leader.items():
            results.update(await self._send_to(leader, partition_batches))
        return results

    async def _send_to(self, leader: int, batches: Mapping[TopicPartition, bytes]
                       ) -> dict[TopicPartition, ProduceResult]:
        by_topic: dict[str, list[ProduceRequest.PartitionProduceData]] = defaultdict(list)
        for tp, batch in batches.items():
            by_topic[tp.topic].append(ProduceRequest.PartitionProduceData(index=tp.partition, records=batch))
        topic_ids = {name: (await self.layout(name)).topic_id for name in by_topic}  # Produce v13 names topics by id
        names = {topic_id: name for name, topic_id in topic_ids.items()}
        request = ProduceRequest(acks=self.acks, timeout_ms=self.timeout_ms, topic_data=[
            ProduceRequest.TopicProduceData(name=name, topic_id=topic_ids[name], partition_data=parts)
            for name, parts in by_topic.items()])
        connection = await self.client.node(leader)
        if self.acks == 0:
            await connection.send_without_response(request, min_version=MIN_PRODUCE_VERSION)
            return {tp: ProduceResult(-1) for tp in batches}
        response = await connection.send(request, ProduceResponse, min_version=MIN_PRODUCE_VERSION,
                                         timeout=self.timeout_ms / 1000 + self.client.timeout)
        results = {}
        for topic in response.responses:
            name = topic.name or names.get(topic.topic_id, "")
            for p in topic.partition_responses:
                error = None if p.error_code == ErrorCode.NONE else ResponseError(p.error_code, p.error_message)
                if error is not None and error.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_ID):
                    self._layouts.pop(name, None)
                results[TopicPartition(name, p.index)] = ProduceResult(p.base_offset, error)
        return results
