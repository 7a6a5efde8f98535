"""Walking a ``.log`` file's batch headers, and the timestamp search built on that walk.

``scan_headers`` reads the 61-byte headers of the batches in a byte range, ``SCAN_CHUNK`` bytes per
``pread``, and never the records (Kafka's ``FileRecords.batchesFrom`` over a file's headers); a segment's
reads, offset lookups and recovery checks use it. ``TimestampSearch`` is ``LogSegment.timestamp_search``'s
work item (Kafka's ``FileRecords.searchForTimestamp``): the forward scan from an indexed position, decoding
only the batch it lands on, on a descriptor of its own so that it can run on an I/O thread.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

from pybroker.log.errors import CorruptLogError, LogStorageError
from pybroker.records.batch import BatchHeader, RecordBatch
from pybroker.records.constants import (
    BATCH_HEADER,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
)
from pybroker.records.errors import RecordsError

__all__ = ["SCAN_CHUNK", "TimestampSearch", "scan_headers"]

SCAN_CHUNK = 8192  # header walks read this much per pread: many small batches per syscall


def scan_headers(pread: Callable[[int, int], bytes | bytearray], path: str, start: int,
                 end: int) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch in ``[start, end)`` of a ``.log`` file read with
    ``pread(size, position)``; headers only, ``SCAN_CHUNK`` bytes per read."""
    chunk: bytes | bytearray = b""
    pos, chunk_pos = start, start
    while pos + RECORD_BATCH_OVERHEAD <= end:
        off = pos - chunk_pos
        if off + RECORD_BATCH_OVERHEAD > len(chunk):
            chunk, chunk_pos, off = pread(min(SCAN_CHUNK, end - pos), pos), pos, 0
            if len(chunk) < RECORD_BATCH_OVERHEAD:
                return
        h = tuple.__new__(BatchHeader, BATCH_HEADER.unpack_from(chunk, off))  # _make without its Python frame
        if h.batch_length < MIN_BATCH_LENGTH or h.magic != CURRENT_MAGIC or h.last_offset_delta < 0:
            raise CorruptLogError(
                f"Corrupt batch header in {path} at position {pos}: length "
                f"{h.batch_length}, magic {h.magic}")
        size = h.batch_length + LOG_OVERHEAD
        if pos + size > end:
            return
        yield pos, h
        pos += size


class TimestampSearch:
    """A segment's forward scan for the first record with timestamp >= ``timestamp`` at or after
    ``starting_offset``, from ``position`` to ``end``, on its own descriptor (closed once run, or
    when collected unrun): any thread, the segment closing meanwhile cannot hand it another file."""

    def __init__(self, path: str, fd: int, position: int, end: int, timestamp: int, starting_offset: int) -> None:
        self.path = path
        self._fd: int | None = fd
        self.position, self.end, self.timestamp, self.starting_offset = position, end, timestamp, starting_offset

    def _pread(self, size: int, position: int) -> bytes:
        assert self._fd is not None
        try:
            return os.pread(self._fd, size, position)
        except OSError as exc:
            raise LogStorageError(f"read of {self.path} at {position} failed: {exc}") from exc

    def __call__(self) -> tuple[int, int] | None:
        try:
            return self._search()
        finally:
            self._close()

    def _search(self) -> tuple[int, int] | None:
        timestamp, starting_offset = self.timestamp, self.starting_offset
        for pos, h in scan_headers(self._pread, self.path, self.position, self.end):
            last = h.base_offset + h.last_offset_delta
            if h.max_timestamp < timestamp or last < starting_offset:
                continue
            try:
                for rec in RecordBatch(self._pread(h.batch_length + LOG_OVERHEAD, pos)).records():
                    if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                        return rec.offset, rec.timestamp
            except RecordsError:
                return max(h.base_offset, starting_offset), h.max_timestamp
        return None

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __del__(self) -> None:
        self._close()
