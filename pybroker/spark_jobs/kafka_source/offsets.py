"""Driver-side look-ups through the Kafka admin API: which partitions exist and where their offsets are.

These are the calls Spark's connector makes from the driver (Metadata and ListOffsets); executors never
plan, they only read the ranges planned here.
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec as AdminOffsetSpec

from pybroker.spark_jobs.kafka_source.options import EARLIEST, LATEST, KafkaPartition, OffsetSpec, SourceOptions

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
REQUEST_TIMEOUT_S = 30.0
# librdkafka sends ListOffsets to the leader its lookup found and waits for that broker until the request times
# out; after a leader's death a new attempt looks the leaders up again and finds the new one.
ATTEMPT_S = 5.0
# Broker errors of a leadership on the move that Kafka's clients retry after a metadata refresh (the
# InvalidMetadataException family: NotLeaderOrFollower, UnknownTopicOrPartition, LeaderNotAvailable,
# FencedLeaderEpoch, ReplicaNotAvailable; and the RetriableExceptions UnknownLeaderEpoch, KafkaStorage,
# OffsetNotAvailable). confluent-kafka's KafkaError.retriable() is False for them.
STALE_METADATA = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                            KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
                            KafkaError.REPLICA_NOT_AVAILABLE, KafkaError.UNKNOWN_LEADER_EPOCH,
                            KafkaError.KAFKA_STORAGE_ERROR, KafkaError.OFFSET_NOT_AVAILABLE})
RETRY_LOCALLY = STALE_METADATA | {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._DESTROY_BROKER,
                                  KafkaError._ALL_BROKERS_DOWN}


class OffsetLookup:
    """Partition discovery and offset resolution for one source; the admin client opens on first use."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(dict(self.options.client_config))
        return self._admin

    def partitions(self) -> list[KafkaPartition]:
        metadata = self.admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        counts = {name: len(topic.partitions) for name, topic in metadata.topics.items()
                  if topic.error is None and name not in INTERNAL_TOPICS}
        return self.options.subscription.select(counts)

    def earliest(self, partitions: Iterable[KafkaPartition]) -> dict[KafkaPartition, int]:
        return self._list_offsets({tp: AdminOffsetSpec.earliest() for tp in partitions})

    def latest(self, partitions: Iterable[KafkaPartition]) -> dict[KafkaPartition, int]:
        return self._list_offsets({tp: AdminOffsetSpec.latest() for tp in partitions})

    def resolve(self, spec: OffsetSpec, partitions: list[KafkaPartition], *,
                starting: bool) -> dict[KafkaPartition, int]:
        """Concrete offsets for `spec` on every partition (a timestamp with no later record maps to latest)."""
        if spec.kind == "earliest":
            return self.earliest(partitions)
        if spec.kind == "latest":
            return self.latest(partitions)
        if spec.kind == "timestamp":
            assert spec.timestamp is not None
            return self._for_timestamps({tp: spec.timestamp for tp in partitions}, starting=starting)
        given = spec.offsets
        missing = [f"{tp.topic}-{tp.partition}" for tp in partitions if tp not in given]
        if missing:
            which = ("startingOffsets" if starting else "endingOffsets") if spec.kind == "offsets" else \
                ("startingOffsetsByTimestamp" if starting else "endingOffsetsByTimestamp")
            raise ValueError(f"{which} must specify every partition read; missing: {', '.join(missing)}")
        if spec.kind == "timestamps":
            return self._for_timestamps({tp: given[tp] for tp in partitions}, starting=starting)
        earliest = self.earliest(tp for tp in partitions if given[tp] == EARLIEST)
        latest = self.latest(tp for tp in partitions if given[tp] == LATEST)
        return {tp: earliest.get(tp, latest.get(tp, given[tp])) for tp in partitions}

    def _for_timestamps(self, timestamps: Mapping[KafkaPartition, int], *,
                        starting: bool) -> dict[KafkaPartition, int]:
        found = self._list_offsets({tp: AdminOffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()})
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        if unmatched and starting and not self.options.timestamp_strategy_latest:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in unmatched)
            raise ValueError(f"No offset matched the starting timestamp for partitions {names}; set "
                             "startingOffsetsByTimestampStrategy to 'latest' to start those at the latest offset")
        return {**found, **self.latest(unmatched)}

    def _list_offsets(self, specs: Mapping[KafkaPartition, AdminOffsetSpec]) -> dict[KafkaPartition, int]:
        if not specs:
            return {}
        isolation = (IsolationLevel.READ_COMMITTED
                     if self.options.client_config.get("isolation.level") == "read_committed"
                     else IsolationLevel.READ_UNCOMMITTED)
        request = {TopicPartition(tp.topic, tp.partition): spec for tp, spec in specs.items()}
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while True:  # short attempts: one long attempt waits for a leader that just died (see ATTEMPT_S)
            attempt_s = min(ATTEMPT_S, max(deadline - time.monotonic(), 0.001))
            futures = self.admin.list_offsets(request, isolation_level=isolation, request_timeout=attempt_s)
            try:
                return {KafkaPartition(tp.topic, tp.partition): future.result().offset
                        for tp, future in futures.items()}
            except KafkaException as exc:
                error = exc.args[0]
                if time.monotonic() >= deadline or not (error.retriable() or error.code() in RETRY_LOCALLY):
                    raise
