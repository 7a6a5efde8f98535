"""The aborted-transaction index of one segment: ``<20-digit base offset>.txnindex``.

Format (Kafka ``TransactionIndex`` / ``AbortedTxn``): entries of 34 bytes back to back, no
header and no checksum::

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64

One entry per aborted transaction, appended to the segment that holds its ABORT marker
(``lastOffset`` is the marker's offset). ``lastStableOffset`` is the partition's LSO right after
the abort; it lets a search stop early (every later entry belongs to transactions that ended
after it). The file is created on the first entry. It is small, so the entries are also kept
in memory; writes go straight to the file. Read-committed fetches use ``collect`` to tell
clients which producer ranges to drop. Not thread-safe.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass

from pybroker.log.errors import CorruptLogError

__all__ = ["AbortedTxn", "TransactionIndex"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
CURRENT_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


class TransactionIndex:
    """Entries of one ``.txnindex`` file; see the module doc."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._entries: list[AbortedTxn] = []
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            usable = len(data) - len(data) % ENTRY_SIZE
            for pos in range(0, usable, ENTRY_SIZE):
                version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
                if version != CURRENT_VERSION:
                    raise CorruptLogError(f"{path}: unknown transaction index entry version {version}")
                self._entries.append(AbortedTxn(pid, first, last, lso))
            if usable != len(data):
                self._rewrite()  # a torn last entry from a crash mid-write

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def append(self, entry: AbortedTxn) -> None:
        if self._entries and entry.last_offset <= self._entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {entry.last_offset} is not after "
                             f"{self._entries[-1].last_offset}")
        self._entries.append(entry)
        with open(self.path, "ab") as f:
            f.write(entry.encode())

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound); True when no later
        segment can hold more (Kafka ``TransactionIndex.collectAbortedTxns``)."""
        found = []
        for entry in self._entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset``."""
        kept = [e for e in self._entries if e.last_offset < offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._rewrite()

    def _rewrite(self) -> None:
        if not self._entries:
            self._unlink()
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(e.encode() for e in self._entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def flush(self) -> None:
        if self._entries and os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, new_path: str) -> None:
        if os.path.exists(self.path):
            os.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self._entries = []
        self._unlink()

    def _unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
