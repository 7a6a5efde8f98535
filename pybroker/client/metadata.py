"""The per-topic routing facts producers and consumers need: topic id and each partition's leader."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError, check
from pybroker.protocol.error_codes import ErrorCode

RETRY_BACKOFF_S = 0.1


@dataclass(frozen=True, slots=True)
class TopicLayout:
    name: str
    #: zero UUID when the broker's Metadata version predates topic ids
    topic_id: uuid.UUID
    #: leader broker id by partition index (None: no leader right now)
    leaders: tuple[int | None, ...]


async def topic_layouts(client: KafkaClient, topics: list[str], *, auto_create: bool = False
                        ) -> dict[str, TopicLayout]:
    """Layouts of existing topics (or created on demand with ``auto_create``, as producers ask); ResponseError
    naming the first one that does not exist. A topic still being created is asked for again until the
    client's timeout."""
    deadline = time.monotonic() + client.timeout
    while True:
        response = await client.metadata(topics, auto_create=auto_create)
        pending = any(t.error_code == ErrorCode.LEADER_NOT_AVAILABLE for t in response.topics)
        if not pending or time.monotonic() + RETRY_BACKOFF_S > deadline:
            break
        await asyncio.sleep(RETRY_BACKOFF_S)
    layouts = {}
    for topic in response.topics:
        name = topic.name or ""
        check(topic.error_code, f"Topic '{name}' does not exist"
              if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None)
        leaders: list[int | None] = [None] * len(topic.partitions)
        for p in topic.partitions:
            if 0 <= p.partition_index < len(leaders):
                leaders[p.partition_index] = p.leader_id if p.leader_id >= 0 else None
        layouts[name] = TopicLayout(name, topic.topic_id, tuple(leaders))
    missing = [t for t in topics if t not in layouts]
    if missing:
        raise ResponseError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{missing[0]}' does not exist")
    return layouts


async def topic_layout(client: KafkaClient, topic: str, *, auto_create: bool = False) -> TopicLayout:
    return (await topic_layouts(client, [topic], auto_create=auto_create))[topic]
