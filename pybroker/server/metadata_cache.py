"""Encoded Metadata and DescribeTopicPartitions answers, reused while the metadata they were
built from is unchanged.

Building and encoding a Metadata answer for a topic of 1,000 partitions costs milliseconds of
Python, and clients ask the same question over and over (librdkafka refreshes it per topic, the
admin API per call). So an answer is kept per request shape (API, version, all topics or the
topics named, anything else that shapes it) together with the metadata objects it was built from.

Validity is checked against the metadata itself rather than a change counter that every writer
would have to remember to bump: `TopicInfo` and `BrokerInfo` are immutable and every change (topic
created, deleted or given partitions, leader or ISR moved, broker registered or gone) replaces the
object, in embedded and ZooKeeper mode alike. An entry is valid when the cluster id, the controller
and the broker list compare equal and each topic it describes is still the very object it was
built from. That check costs one dictionary lookup per topic, against one object per partition
for building the answer again.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from pybroker.controller.metadata import BrokerInfo, ClusterMetadata, TopicInfo

#: Requested topics as (name, topic id) pairs in request order; None asks for every topic.
RequestedTopics = tuple[tuple[str | None, uuid.UUID | None], ...] | None
MAX_ENTRIES = 64


@dataclass(frozen=True, slots=True)
class _Entry:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
    #: The topic objects the answer describes: every topic for an all-topics answer (with its
    #: name in `names`), else what each requested topic resolved to (and `names` is empty).
    names: tuple[str, ...]
    topics: tuple[TopicInfo | None, ...]
    body: bytes


class MetadataAnswerCache:
    """Encoded answers of one broker's metadata, at most `max_entries` of them (all dropped when full)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._entries: dict[tuple[Hashable, RequestedTopics], _Entry] = {}

    def get(self, metadata: ClusterMetadata, shape: Hashable, requested: RequestedTopics) -> bytes | None:
        """The cached body for this request, or None when there is none or the metadata changed.

        `shape` is everything besides the topics that decides the answer: at least the API key and version."""
        entry = self._entries.get((shape, requested))
        if entry is None or not self._still_valid(entry, metadata, requested):
            return None
        return entry.body

    def put(self, metadata: ClusterMetadata, shape: Hashable, requested: RequestedTopics,
            topics: Sequence[TopicInfo | None], body: bytes) -> None:
        """Keep `body`, built from `topics`: what each requested topic resolved to, None for an unknown
        one (ignored for all topics). Only answers built without awaiting anything belong here."""
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        every = metadata.topics() if requested is None else {}
        described = tuple(every.values()) if requested is None else tuple(topics)
        self._entries[(shape, requested)] = _Entry(metadata.cluster_id, metadata.controller_id,
                                                     tuple(metadata.brokers()), tuple(every), described, body)

    @staticmethod
    def _still_valid(entry: _Entry, metadata: ClusterMetadata, requested: RequestedTopics) -> bool:
        if (entry.controller_id != metadata.controller_id or entry.cluster_id != metadata.cluster_id
                or entry.brokers != tuple(metadata.brokers())):
            return False
        if requested is None:
            current = metadata.topics()
            return len(current) == len(entry.names) and all(
                current.get(name) is info for name, info in zip(entry.names, entry.topics))
        return all(resolve(metadata, name, topic_id) is info
                   for (name, topic_id), info in zip(requested, entry.topics))


_caches: WeakKeyDictionary[ClusterMetadata, MetadataAnswerCache] = WeakKeyDictionary()


def answer_cache(metadata: ClusterMetadata) -> MetadataAnswerCache:
    """The cache of answers built from `metadata` (one broker's), created on first use."""
    cache = _caches.get(metadata)
    if cache is None:
        cache = _caches[metadata] = MetadataAnswerCache()
    return cache


def resolve(metadata: ClusterMetadata, name: str | None, topic_id: uuid.UUID | None) -> TopicInfo | None:
    """A requested topic: by id when one is given (Metadata v12+; Kafka then ignores the name, which the
    Java client sends as ""), else by name."""
    if topic_id is not None and topic_id.int != 0:
        return metadata.topic_by_id(topic_id)
    return metadata.topic(name) if name is not None else None
