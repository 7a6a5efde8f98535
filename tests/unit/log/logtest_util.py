"""Builders for log tests: batches from ``pybroker.records.build_batch`` and small configs."""

from __future__ import annotations

import os

from pybroker.log import LogConfig, PartitionLog
from pybroker.records.record import RecordInput, build_batch

NOW = 1_700_000_000_000

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=64, segment_index_bytes=4096,
                  file_delete_delay_ms=0, retention_ms=-1)


def batch(n: int = 1, *, value: bytes = b"v" * 10, ts: int = NOW, pid: int = -1, epoch: int = -1,
          seq: int = -1, ts_step: int = 0, base_offset: int = 0) -> bytearray:
    """A CreateTime batch of ``n`` records with timestamps ts, ts+ts_step, ..."""
    records = [RecordInput(f"k{i}".encode(), value, timestamp=ts + i * ts_step) for i in range(n)]
    return bytearray(build_batch(records, base_offset=base_offset, producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq))


def open_log(path: os.PathLike[str] | str, config: LogConfig = SMALL, *, now_ms: int = NOW,
             **kwargs: object) -> PartitionLog:
    return PartitionLog.open(str(path), "t", 0, config, now_ms=now_ms, **kwargs)  # type: ignore[arg-type]


def read_all(log: PartitionLog, start: int | None = None) -> list[bytes]:
    """Every batch from ``start`` (default log start) to the LEO, one read per batch-group."""
    from pybroker.records.batch import iter_batches

    out: list[bytes] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        if info.slices is None:
            break
        data = info.slices.read()
        for rb in iter_batches(data):
            out.append(bytes(rb.raw()))
            offset = rb.last_offset + 1
    return out


def segment_files(path: os.PathLike[str] | str) -> list[str]:
    return sorted(os.listdir(path))


def crash(log: PartitionLog) -> None:
    """Drop a log as a crash would: no flush, no index trim, no final time-index entry."""
    for seg in log.segments:
        seg._log.close()
        for idx in (seg.offset_index, seg.time_index):
            if idx._mm is not None:
                idx._mm.close()
                idx._mm = None
            idx._closed = True
    log._local.closed = True
