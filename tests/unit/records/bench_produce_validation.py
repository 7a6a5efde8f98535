"""Microbenchmark of the produce path's per-record cost: header/CRC check alone, plus LogValidator's
record walk, plus the append. Run: .venv/bin/python -m tests.unit.records.bench_produce_validation"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

from pybroker.log.config import LogConfig
from pybroker.log.log import PartitionLog
from pybroker.records.batch import Compression, TimestampType, set_max_timestamp, validate_batch
from pybroker.records.record import RecordInput, build_batch, now_ms
from pybroker.records.validation import ProducePolicy, validate_produced_batch

RECORDS = 1000


def best_of(fn: Callable[[], object], rounds: int = 5, calls: int = 100) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def main() -> None:
    policy = ProducePolicy(timestamp_before_max_ms=3_600_000, timestamp_after_max_ms=3_600_000)
    for codec in (Compression.NONE, Compression.LZ4):
        batch = build_batch([RecordInput(b"key-%d" % i, b"v" * 100, timestamp=now_ms()) for i in range(RECORDS)],
                            compression=codec)
        log = PartitionLog.open(tempfile.mkdtemp(), "bench", 0, LogConfig(), now_ms=now_ms())

        def header_only() -> None:
            validate_batch(batch, 0, max_size=1048588)

        def validated() -> None:
            validate_produced_batch(validate_batch(batch, 0, max_size=1048588, check_counts=False), policy,
                                    now_ms(), "bench-0")

        def append() -> None:
            buf = bytearray(batch)
            max_ts = validate_produced_batch(validate_batch(buf, 0, max_size=1048588, check_counts=False), policy,
                                             now_ms(), "bench-0")
            set_max_timestamp(buf, 0, TimestampType.CREATE_TIME, max_ts)
            log.append_as_leader(buf, leader_epoch=0, now_ms=now_ms())

        for name, fn in (("header+CRC only (before)", header_only), ("with record walk (after)", validated),
                         ("record walk + append", append)):
            cost = best_of(fn)
            print(f"{codec.name:5} {len(batch):7d} B  {name:26} {cost * 1e6:8.1f} us/batch "
                  f"{cost * 1e9 / RECORDS:6.0f} ns/record")


if __name__ == "__main__":
    main()
