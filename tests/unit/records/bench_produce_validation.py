"""Microbenchmark of the produce path's per-record cost: header/CRC check alone, plus LogValidator's
record walk (pure Python, then vectorized), plus the append; and where the vectorized walk starts to
pay (validation.MIN_RECORDS). Run: .venv/bin/python -m tests.unit.records.bench_produce_validation"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

from pybroker.log.config import LogConfig
from pybroker.log.log import PartitionLog
from pybroker.records import validation
from pybroker.records.batch import Compression, TimestampType, set_max_timestamp, validate_batch
from pybroker.records.record import RecordInput, build_batch, now_ms
from pybroker.records.validation import ProducePolicy, validate_produced_batch

RECORDS = 1000
POLICY = ProducePolicy(timestamp_before_max_ms=3_600_000, timestamp_after_max_ms=3_600_000)


def best_of(fn: Callable[[], object], rounds: int = 15, calls: int = 30) -> float:
    """Best mean CPU time of ``calls`` calls: this thread's CPU time, so that the figures hold on a
    machine loaded by other work (wall time there counts the time this process waits for a core)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - started) / calls)
    return best


def make_batch(records: int, headers: int, codec: Compression) -> bytes:
    """~100 B records: a key, 100 B value, ``headers`` small headers."""
    return build_batch([RecordInput(b"key-%d" % i, b"v" * 100, [("h%d" % h, b"x" * 8) for h in range(headers)],
                                    timestamp=now_ms()) for i in range(records)], compression=codec)


def walk(batch: bytes, min_records: int) -> Callable[[], object]:
    def validated() -> None:
        validation.MIN_RECORDS = min_records
        validate_produced_batch(validate_batch(batch, 0, max_size=1048588, check_counts=False), POLICY,
                                now_ms(), "bench-0")
    return validated


def main() -> None:
    python_walk, vectorized = 10**9, 1
    for codec in (Compression.NONE, Compression.LZ4):
        for headers in (0, 2):
            batch = make_batch(RECORDS, headers, codec)
            log = PartitionLog.open(tempfile.mkdtemp(), "bench", 0, LogConfig(), now_ms=now_ms())

            def header_only() -> None:
                validate_batch(batch, 0, max_size=1048588)

            def append() -> None:
                buf = bytearray(batch)
                max_ts = validate_produced_batch(validate_batch(buf, 0, max_size=1048588, check_counts=False),
                                                 POLICY, now_ms(), "bench-0")
                set_max_timestamp(buf, 0, TimestampType.CREATE_TIME, max_ts)
                log.append_as_leader(buf, leader_epoch=0, now_ms=now_ms())

            def append_unvalidated() -> None:
                log.append_as_leader(bytearray(batch), leader_epoch=0, now_ms=now_ms())

            for name, fn in (("header+CRC only", header_only), ("+ Python record walk", walk(batch, python_walk)),
                             ("+ vectorized record walk", walk(batch, vectorized)),
                             ("append alone", append_unvalidated), ("vectorized walk + append", append)):
                validation.MIN_RECORDS = vectorized
                cost = best_of(fn)
                print(f"{codec.name:5} {headers} headers {len(batch):7d} B  {name:26} {cost * 1e6:8.1f} us/batch "
                      f"{cost * 1e9 / RECORDS:6.0f} ns/record")
    for records in (16, 32, 64, 96, 128):
        batch = make_batch(records, 0, Compression.NONE)
        slow, fast = best_of(walk(batch, python_walk)), best_of(walk(batch, vectorized))
        print(f"{records:4d} records: Python walk {slow * 1e6:7.1f} us, vectorized {fast * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
