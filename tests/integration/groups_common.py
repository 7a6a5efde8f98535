"""Shared pieces of the consumer-group tests: broker settings, topics, keyed messages, bounded waits,
assignment checks and a member running in a child process (to be SIGKILLed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Iterable, Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.broker_process import REPO, BrokerProcess

GROUP_OVERRIDES = {
    "group.min.session.timeout.ms": "1000",
}
PARTITIONS = 6
MEMBERS = 3
SESSION_TIMEOUT_MS = 6000
KILL_SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 300
MAX_POLL_INTERVAL_MS = 20000
"""The rebalance timeout the clients send: bounds a rebalance if a member never rejoins."""
WAIT_S = 30.0


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per module, with short group timers; tests use distinct topics and groups."""
    process = BrokerProcess(tmp_path_factory.mktemp("groups"), overrides=GROUP_OVERRIDES).start()
    yield process
    process.kill()




def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=30)


def produce_keyed(bootstrap: str, topic: str, count: int) -> set[bytes]:
    """``count`` keyed messages (value == key) spread over the topic's partitions; returns the values."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    errors = []
    values = [f"{topic}-{i}".encode() for i in range(count)]
    for value in values:
        producer.produce(topic, key=value, value=value, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0
    assert errors == []
    return set(values)


def is_balanced(assignments: Iterable[set[int]], partitions: int = PARTITIONS) -> bool:
    """Every member holds the same number of partitions, none twice, all of them covered."""
    assignments = [set(a) for a in assignments]
    if not assignments:
        return False
    share = partitions // len(assignments)
    union = set().union(*assignments)
    return (all(len(a) == share for a in assignments) and sum(map(len, assignments)) == partitions
            and union == set(range(partitions)))


def assert_balanced(assignments: Iterable[set[int]], partitions: int = PARTITIONS) -> None:
    assignments = [set(a) for a in assignments]
    assert is_balanced(assignments, partitions), f"unbalanced assignment {assignments}"


Consumed = tuple[int, int, bytes]
"""(partition, offset, value) of one consumed message, whatever the client."""


def positions_after(consumed: Iterable[Consumed]) -> dict[int, int]:
    """The offset to commit per partition: one past the last message consumed there."""
    positions: dict[int, int] = {}
    for partition, offset, _ in consumed:
        positions[partition] = max(positions.get(partition, 0), offset + 1)
    return positions


def assert_resumed_exactly(first: list[Consumed], rest: list[Consumed], sent: set[bytes],
                           committed: dict[int, int]) -> None:
    """The consumer after the restart saw every message the first one did not, each once."""
    seen_first = [value for _, _, value in first]
    seen_rest = [value for _, _, value in rest]
    assert len(set(seen_first)) == len(seen_first) and len(set(seen_rest)) == len(seen_rest)
    assert set(seen_first).isdisjoint(seen_rest), "messages repeated after the restart"
    assert set(seen_first) | set(seen_rest) == sent, "messages lost across the restart"
    for partition, offset, _ in rest:
        assert offset >= committed.get(partition, 0)


def report(client: str, what: str, seconds: float) -> None:
    """Timing figures for the report (run pytest with -s to see them); never asserted."""
    print(f"\n[group-timing] {client:<13} {what:<40} {seconds * 1000:8.0f} ms", flush=True)


class ChildMember:
    """A consumer-group member in its own process (``group_member.py``), so it can die without a
    LeaveGroup; its current assignment is read from the lines it prints."""

    def __init__(self, client: str, bootstrap: str, topic: str, group: str, session_timeout_ms: int,
                 assignor: str = "range"):
        args = [sys.executable, "-m", "tests.integration.group_member", client, bootstrap, topic, group,
                str(session_timeout_ms), str(HEARTBEAT_INTERVAL_MS), assignor]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.assignment: set[int] = set()
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.strip()
            self.lines.append(line)
            if line.startswith("assigned"):
                self.assignment = {int(p) for p in line.split()[1:]}

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read()
