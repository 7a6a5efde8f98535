"""What a log's appends and reads answer: ``AppendInfo`` (Kafka's ``LogAppendInfo``) and ``FetchInfo``
(Kafka's ``FetchDataInfo``), handed to the replication layer."""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.log.file_slice import FileSlice

__all__ = ["AppendInfo", "FetchInfo"]


@dataclass(slots=True)
class AppendInfo:
    """Outcome of an append; ``duplicate`` means an idempotent retry answered from state."""

    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int
    duplicate: bool
    max_timestamp: int
    offset_of_max_timestamp: int


@dataclass(slots=True)
class FetchInfo:
    """Whole batches read from one segment (None when there is nothing to return)."""

    slices: FileSlice | None
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
