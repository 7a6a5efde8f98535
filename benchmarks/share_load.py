"""W15's client load (share groups, KIP-932), in a process of its own: `python -m benchmarks.share_load OP JSON`.

`fill` writes the records once; `share` reads them all with `consumers` confluent-kafka ShareConsumers of one new
share group (threads of this process: librdkafka's poll releases the GIL), implicitly accepting what each poll
returned; `classic` reads them with one classic Consumer of a new group. Both clock from the first record
received to the last new one and read the broker's CPU (`load.cpu_seconds`) over the same window, so the group's
start-up (joins, assignment) is left out of both.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from benchmarks.load import PAYLOAD, cpu_seconds, create_topic, produce_all, producer

Params = dict[str, Any]
Result = dict[str, float]
POLL_S = 0.2


def fill(p: Params) -> Result:
    """`messages` records of 100 bytes in one partition, `batch` records per produced batch."""
    create_topic(p["bootstrap"], p["topic"], 1, p["timeout"])
    client = producer(p["bootstrap"], **{"linger.ms": 5, "batch.num.messages": p["batch"], "acks": 1})
    produce_all(client, p["topic"], p["messages"], 1, PAYLOAD, p["timeout"])
    return {"messages": p["messages"]}


class _Window:
    """The first record's and the last new record's clock and broker CPU; the offsets seen and every delivery."""

    def __init__(self, pid: int, count: int) -> None:
        self.pid, self.count = pid, count
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.seen: set[int] = set()
        self.attempts: set[tuple[int, int]] = set()
        self.deliveries = 0
        self.start = self.end = self.cpu_start = self.cpu_end = 0.0

    def received(self, deliveries: list[tuple[int, int]]) -> None:
        """(offset, delivery count) pairs; one seen twice was handed to two consumers at once, a broker bug."""
        with self.lock:
            if self.done.is_set():  # what members closing hand each other (their fetched records) is not counted
                return
            if not self.deliveries and deliveries:
                self.start, self.cpu_start = time.perf_counter(), cpu_seconds(self.pid)
            self.deliveries += len(deliveries)
            twice = self.attempts.intersection(deliveries)
            if twice:
                raise RuntimeError(f"(offset, delivery count) {min(twice)} delivered twice")
            self.attempts.update(deliveries)
            self.seen.update(offset for offset, _ in deliveries)
            if len(self.seen) >= self.count and not self.done.is_set():
                self.end, self.cpu_end = time.perf_counter(), cpu_seconds(self.pid)
                self.done.set()

    def result(self) -> Result:
        elapsed = max(self.end - self.start, 1e-9)
        return {"records_per_s": self.count / elapsed, "cpu_us": 1e6 * (self.cpu_end - self.cpu_start) / self.count,
                "redelivered": self.deliveries - self.count}


def _earliest(bootstrap: str, group: str, timeout: float) -> None:
    """Kafka's share groups start at the log end: this one reads the records already written."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout)


def share(p: Params) -> Result:
    _earliest(p["bootstrap"], p["group"], p["timeout"])
    window = _Window(p["pid"], p["messages"])
    errors: list[BaseException] = []

    def member() -> None:
        consumer = ShareConsumer({"bootstrap.servers": p["bootstrap"], "group.id": p["group"]})
        try:
            consumer.subscribe([p["topic"]])
            while not window.done.is_set():
                messages = consumer.poll(POLL_S)
                failed = [m.error() for m in messages if m.error() is not None]
                if failed:
                    raise KafkaException(failed[0])
                window.received([(m.offset() or 0, m.delivery_count() or 0) for m in messages])
        except BaseException as exc:  # reported by the main thread, which ends the run
            errors.append(exc)
            window.done.set()
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, daemon=True) for _ in range(p["consumers"])]
    for thread in threads:
        thread.start()
    if not window.done.wait(p["timeout"]):
        window.done.set()
        raise RuntimeError(f"{len(window.seen)} of {p['messages']} records delivered in {p['timeout']:.0f} s")
    for thread in threads:
        thread.join(p["timeout"])
    if errors:
        raise errors[0]
    return window.result()


def classic(p: Params) -> Result:
    window = _Window(p["pid"], p["messages"])
    consumer = Consumer({"bootstrap.servers": p["bootstrap"], "group.id": p["group"],
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([p["topic"]])
    deadline = time.monotonic() + p["timeout"]
    try:
        while not window.done.is_set():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(window.seen)} of {p['messages']} records consumed in {p['timeout']:.0f} s")
            messages = consumer.consume(num_messages=10000, timeout=POLL_S)
            failed = [m.error() for m in messages if m.error() is not None]
            if failed:
                raise KafkaException(failed[0])
            window.received([(m.offset() or 0, 1) for m in messages])
    finally:
        consumer.close()
    return window.result()


OPS: dict[str, Callable[[Params], Result]] = {"fill": fill, "share": share, "classic": classic}

if __name__ == "__main__":
    print(json.dumps(OPS[sys.argv[1]](json.loads(sys.argv[2]))))
