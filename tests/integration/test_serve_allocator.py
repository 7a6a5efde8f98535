"""A real `pybroker serve` sets glibc's allocator for big batches (pybroker.common.allocator): it says so at
start-up, and a 4 MiB produced batch is received and checked in its heap, which keeps the memory for the next
one, where glibc's defaults map such buffers apart and return them (the environment's choice wins)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from pybroker.common.allocator import is_glibc
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.skipif(not is_glibc(), reason="glibc's allocator only")
BATCH = 4 << 20
TUNED = "Allocator: glibc malloc, mmap threshold 8 MiB, trim threshold 32 MiB"


def heap_bytes(pid: int) -> int:
    """The size of the main arena's heap (the [heap] mapping) of process `pid`."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        if line.endswith("[heap]"):
            start, end = (int(part, 16) for part in line.split()[0].split("-"))
            return end - start
    return 0


def heap_growth_over_a_big_batch(broker: BrokerProcess) -> int:
    assert broker.process is not None
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 2 * BATCH, "linger.ms": 0,
                         "acks": "all"})
    producer.produce("warm", b"w")  # the topic, the connection and the first request: not the big batch's growth
    assert producer.flush(30) == 0
    before = heap_bytes(broker.process.pid)
    producer.produce("big", b"x" * BATCH)
    assert producer.flush(30) == 0
    return heap_bytes(broker.process.pid) - before


def test_serve_receives_a_big_batch_in_its_heap_and_keeps_the_memory(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, {"message.max.bytes": str(2 * BATCH)}).start()
    try:
        assert TUNED in broker.log_text()
        assert heap_growth_over_a_big_batch(broker) >= BATCH
    finally:
        broker.stop()


def test_with_glibcs_defaults_from_the_environment_the_big_batch_is_mapped_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control that lets the test above fail: glibc's own thresholds, asked for through GLIBC_TUNABLES."""
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072")
    broker = BrokerProcess(tmp_path, {"message.max.bytes": str(2 * BATCH)}).start()
    try:
        assert "Allocator: glibc malloc as the environment sets it (glibc.malloc.mmap_threshold)" in broker.log_text()
        assert heap_growth_over_a_big_batch(broker) < BATCH
    finally:
        broker.stop()
