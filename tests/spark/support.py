"""Helpers for the Spark tests: plain confluent-kafka set-up and independent read-back, job arguments, and the
connector a parametrized test runs through."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.spark import remote

#: --driver-java-options of the jobs the tests spark-submit: their driver (local executors in the same JVM) lives
#: for seconds, so with only the C1 compiler and the serial collector it spends less on compiling and collecting
#: for the same job (the report's spark-submit: 22.6-23.1 s CPU -> 16.1-16.4 s).
SUBMITTED_DRIVER_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


class Kafka:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def close(self) -> None:
        del self.admin

    def create_topic(self, name: str, *, partitions: int, config: dict[str, str] | None = None) -> None:
        futures = self.admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
        futures[name].result(30)

    def offsets(self, topic: str, partitions: int, spec: OffsetSpec) -> dict[int, int]:
        futures = self.admin.list_offsets({TopicPartition(topic, p): spec for p in range(partitions)})
        return {tp.partition: f.result(30).offset for tp, f in futures.items()}

    def produce(self, topic: str, records: list[tuple[bytes, bytes, int]], *, one_batch_each: bool = False,
                partition: int | None = None) -> None:
        """(key, value, timestamp ms) records; `one_batch_each` sends each record as its own batch."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0 if one_batch_each else 5})
        for key, value, timestamp in records:
            extra = {} if partition is None else {"partition": partition}
            producer.produce(topic, key=key, value=value, timestamp=timestamp, **extra)
            if one_batch_each:
                producer.flush(30)
        assert producer.flush(30) == 0

    def read_all(self, topic: str) -> list[Message]:
        """Every message up to the current end of each partition, by assignment (no group)."""
        metadata = self.admin.list_topics(topic, timeout=30)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = self.offsets(topic, len(partitions), OffsetSpec.latest())
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "spark-tests-reader",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions if ends[p] > 0])
        pending = {p for p in partitions if ends[p] > 0}
        messages: list[Message] = []
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(10_000, timeout=1.0):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    pending.discard(m.partition())
                    continue
                messages.append(Message(m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1]))
        consumer.close()
        assert not pending, f"partitions {pending} not read to their end"
        return messages


@dataclass(frozen=True)
class Jobs:
    """Runs `tests/spark/operations.py` functions through one Kafka connector: "python" or "jvm"."""
    connector: str
    call: Callable[..., Any]

    def __call__(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        return self.call(operation, *args, **kwargs)

    def check_sources(self, result: dict[str, Any]) -> None:
        """A streaming result read through this connector: Spark's own source is `KafkaV2[...]`."""
        assert result["error"] is None, result["error"]
        assert result["sources"] and all(s.startswith("KafkaV2[") == (self.connector == "jvm")
                                         for s in result["sources"]), result["sources"]


def require_connector() -> None:
    """Skip when the connector's jars are not there (no ../shared); fail when only the venv is missing."""
    if not remote.JARS_DIR.is_dir():
        pytest.skip(f"{remote.JARS_DIR} is absent: no jars of Spark's JVM Kafka connector to test with")
    assert (remote.VENV / "bin" / "python").exists(), f"{remote.VENV} is missing: run `make test` (it creates it)"


def job_args(**values: object) -> argparse.Namespace:
    """What a job's command line would give it, with its defaults; tests override per call."""
    defaults = {"master": None, "shuffle_partitions": 2, "kafka_option": [], "starting_offsets": "earliest",
                "max_offsets_per_trigger": None, "min_partitions": None, "available_now": True}
    return argparse.Namespace(**{**defaults, **values})
