"""Sparse, memory-mapped offset and time indexes of one log segment.

Both indexes are arrays of fixed-size big-endian entries in a file named after the segment's
base offset (``00000000000000368769.index`` / ``.timeindex``), exactly Kafka's layout, so a
Kafka tool can read them. They carry no checksum: after an unclean shutdown they are rebuilt
from the ``.log`` (``LogSegment.recover``), and ``sanity_check`` catches the damage a crash can
leave in them (a torn entry, the zero-filled preallocated tail, an entry past the log end).

The file of the active segment is preallocated to ``segment.index.bytes`` so that appends never
grow the file or remap; ``trim_to_valid_size`` cuts it back to the real entries when the segment
is rolled or closed. A file's entry count is its length divided by the entry size, as in
Kafka: a preallocated file that was never trimmed (crash) therefore reports zero entries at its
tail, which ``sanity_check`` rejects as "entries not increasing".

Descriptors. Like Kafka's ``AbstractIndex``, an index holds its mapping and no open file: Python's
``mmap.mmap`` keeps a duplicate of the descriptor for as long as the mapping lives (until 3.13's
``trackfd``), which cost every partition two descriptors beside its ``.log``, so the mapping is made
with libc's ``mmap`` (``_FileMapping``) and the file closed right away. A descriptor is opened again
only for the moment a resize, trim or reset takes (and by a flush, which fsyncs on its own descriptor);
an index therefore costs no descriptor at rest, and a broker one per segment.

Entries are read with ``struct.unpack_from`` straight from the mapping: no copy of the file, no
per-entry objects beyond the unpacked tuple, and the page cache is the only cache. Lookups are a
binary search over entry slots. Like Kafka's ``AbstractIndex`` we first try the *warm section*
(the last 8 KiB of entries): almost every lookup comes from a consumer or follower near the log
end, so it only touches the few pages that are already hot, instead of the pages a textbook
binary search would visit at 1/2, 1/4, ... of the file.

Not thread-safe: the single event loop that owns the log serialises every call.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from typing import Iterator

from pybroker.log.errors import CorruptLogError, LogClosedError, LogError

__all__ = ["OffsetIndex", "TimeIndex", "OffsetPosition", "TimestampOffset"]

INT32_MAX = 2**31 - 1
_WARM_BYTES = 8192  # Kafka AbstractIndex: warm section covers the last 8 KiB of entries

OffsetPosition = tuple[int, int]
"""(absolute offset, byte position in the .log file)."""

TimestampOffset = tuple[int, int]
"""(timestamp ms, absolute offset)."""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = 4  # Linux <sys/mman.h>


def _libc_error(call: str, path: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{call} of {path} failed: {os.strerror(code)}")


_memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_view.restype = ctypes.py_object
_memory_view.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)
_PYBUF_WRITE = 0x200


class _FileMapping:
    """A shared read-write mapping of a file's first ``length`` bytes that holds no descriptor.

    ``view`` (a memoryview straight over the mapping, one object) is the only way in, and is never handed
    out: every use copies out of it or packs into it, so nothing can touch the memory once ``close``
    unmapped it (the owner drops it before that).
    """

    __slots__ = ("view", "_address", "_length", "_path")

    def __init__(self, fd: int, length: int, path: str) -> None:
        address = _libc.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            raise _libc_error("mmap", path)
        self._address: int | None = address
        self._length, self._path = length, path
        self.view: memoryview = _memory_view(address, length, _PYBUF_WRITE)

    def flush(self) -> None:
        """msync: the entries reach the file on disk."""
        if self._address is not None and _libc.msync(self._address, self._length, _MS_SYNC) != 0:
            raise _libc_error("msync", self._path)

    def close(self) -> None:
        """Unmap (idempotent)."""
        if self._address is not None:
            self.view.release()
            _libc.munmap(self._address, self._length)
            self._address = None

    def __del__(self) -> None:
        self.close()


class _MmapIndex:
    """Shared mmap bookkeeping; subclasses define the entry struct and the search key."""

    ENTRY: struct.Struct
    KIND = "index"
    SPARE_ENTRIES = 0  # slots kept free when full (the time index keeps one, see there)
    is_full: bool  # kept by ``_set_entries``

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10485760,
                 *, preallocate: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entry_size = self.ENTRY.size
        self._max_index_size = max(self._entry_size, max_index_size - max_index_size % self._entry_size)
        self._mm: _FileMapping | None = None
        self._closed = False
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._file_length = os.fstat(fd).st_size  # kept for sanity_check (torn entry)
            self._length = self._file_length
            self._set_entries(self._file_length // self._entry_size)
            if preallocate and self._length != self._max_index_size:
                os.ftruncate(fd, self._max_index_size)
                self._length = self._max_index_size
                self._set_entries(min(self._entries, self._length // self._entry_size))
                if self._file_length == 0:
                    # The first store through a mapping of a never-written ext4 file stalls for ~2.5 ms
                    # (measured here; a pwrite costs ~5 us), which across many new segments starves
                    # the event loop. Writing the zeros the page already holds takes that cost off it.
                    os.pwrite(fd, bytes(self._entry_size), 0)
            if self._length > 0:
                self._mm = _FileMapping(fd, self._length, path)
        finally:
            os.close(fd)  # the mapping needs no descriptor

    # -- properties ---------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        """Number of valid entries."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """Entries that fit in the current mapping (shrinks to ``entries`` once trimmed)."""
        return self._length // self._entry_size

    @property
    def size_in_bytes(self) -> int:
        """Bytes of valid entries (the file is longer while preallocated)."""
        return self._entries * self._entry_size

    # -- internals ----------------------------------------------------------------------------

    def _map(self) -> memoryview:
        if self._closed:
            raise LogClosedError(f"{self.KIND} {self.path} is closed")
        assert self._mm is not None, "entries > 0 implies a mapping"
        return self._mm.view

    def _entry(self, slot: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._map(), slot * self._entry_size)

    def _largest_lower_bound_slot(self, target: int, field: int = 0) -> int:
        """Slot of the last entry whose ``field`` is <= target, or -1 (binary search, warm first).

        ``field`` 0 is the search key (relative offset / timestamp); the time index also
        searches by its field 1 (relative offset) when truncating.
        """
        n = self._entries
        if n == 0:
            return -1
        mm, size, unpack = self._map(), self._entry_size, self.ENTRY.unpack_from

        def key(slot: int) -> int:
            return unpack(mm, slot * size)[field]

        if key(0) > target:
            return -1
        warm = max(0, n - 1 - _WARM_BYTES // size)
        lo, hi = (warm, n - 1) if key(warm) <= target else (0, warm)
        while lo < hi:  # invariant: key(lo) <= target and the answer is in [lo, hi]
            mid = (lo + hi + 1) // 2
            if key(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _set_entries(self, entries: int) -> None:
        """Every change of the entry count or of the mapping's length ends here: ``is_full`` (True when no
        further entry fits, the segment must roll) is a plain attribute since every append asks it."""
        self._entries = entries
        self.is_full = entries >= self._length // self._entry_size - self.SPARE_ENTRIES

    def _truncate_to_entries(self, entries: int) -> None:
        self._set_entries(max(0, min(entries, self._entries)))

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise LogError(f"offset {offset} does not fit {self.KIND} of segment {self.base_offset}")
        return rel

    def _check_length(self) -> None:
        if self._file_length % self._entry_size:
            raise CorruptLogError(
                f"Corrupt {self.KIND} {self.path}: length {self._file_length} is not a multiple of "
                f"{self._entry_size}")

    # -- public maintenance -------------------------------------------------------------------

    def iter_entries(self) -> Iterator[tuple[int, int]]:
        """Raw entries in file order (relative offsets as stored)."""
        if self._entries == 0:
            return iter(())
        return self.ENTRY.iter_unpack(bytes(self._map()[: self._entries * self._entry_size]))

    def reset(self) -> None:
        """Forget every entry and preallocate again, ready for a rebuild (Kafka ``reset``)."""
        self._set_entries(0)
        self.resize(self._max_index_size)

    def resize(self, new_size: int) -> None:
        """Remap at ``new_size`` bytes (rounded down to whole entries), keeping entries that fit."""
        if self._closed:
            raise LogClosedError(f"{self.KIND} {self.path} is closed")
        new_len = new_size - new_size % self._entry_size
        if new_len == self._length:
            return
        fd = os.open(self.path, os.O_RDWR)  # first: out of descriptors, the index is left as it was
        try:
            if self._mm is not None:
                self._mm.close()
                self._mm = None
            os.ftruncate(fd, new_len)
            self._length = self._file_length = new_len
            self._set_entries(min(self._entries, new_len // self._entry_size))
            if new_len > 0:
                self._mm = _FileMapping(fd, new_len, self.path)
        finally:
            os.close(fd)

    def preallocate(self) -> None:
        """Grow back to ``segment.index.bytes`` (a truncated segment becomes active again)."""
        self.resize(self._max_index_size)

    def trim_to_valid_size(self) -> None:
        """Cut the file to its real entries (on roll and close)."""
        self.resize(self._entries * self._entry_size)

    def flush(self) -> None:
        """msync the mapping so the entries reach the disk."""
        if self._mm is not None and not self._closed:
            self._mm.flush()

    def rename(self, new_path: str) -> None:
        """Rename the file (e.g. to ``.deleted``); the mapping stays valid."""
        os.rename(self.path, new_path)
        self.path = new_path

    def close(self) -> None:
        """Trim, unmap and forget; further calls raise LogClosedError."""
        if self._closed:
            return
        if os.path.exists(self.path):
            self.trim_to_valid_size()
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._closed = True

    def unmap(self) -> None:
        """Unmap and forget without trimming: the file is about to go (its log was deleted)."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._closed = True

    def delete(self) -> None:
        """Unmap and remove the file."""
        self.unmap()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_MmapIndex):
    """Sparse map from offset to byte position in the segment's ``.log`` file (``.index``).

    Format: 8-byte big-endian entries ``relativeOffset int32 | position int32`` where
    ``relativeOffset = offset - base_offset`` (so a segment holds at most 2**31 offsets) and
    ``position`` is the byte position of a batch start in the ``.log``. Following Kafka's
    ``LogSegment.append``, the key is the *largest* offset of the appended batch(es) and the
    position is where that append started, so ``lookup(t)`` names a batch that ends at or before
    ``t``; the reader scans batch headers forward from there to the first batch whose last
    offset is >= ``t``. Entries are strictly increasing in both fields.
    """

    ENTRY = struct.Struct(">ii")
    KIND = "offset index"

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty (Kafka ``lastOffset``)."""
        if self._entries == 0:
            return self.base_offset
        return self.base_offset + self._entry(self._entries - 1)[0]

    def entry(self, slot: int) -> OffsetPosition:
        """Absolute (offset, position) of entry ``slot``."""
        rel, pos = self._entry(slot)
        return self.base_offset + rel, pos

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Greatest entry with offset <= target; ``(base_offset, 0)`` when there is none."""
        slot = self._largest_lower_bound_slot(target_offset - self.base_offset)
        return (self.base_offset, 0) if slot < 0 else self.entry(slot)

    def append(self, offset: int, position: int) -> bool:
        """Add an entry; ignored (False) unless offset and position both grow, or when full."""
        rel = self._relative(offset)
        if self._entries:
            last_rel, last_pos = self._entry(self._entries - 1)
            if rel <= last_rel or position <= last_pos:
                return False
        if self.is_full or not 0 <= position <= INT32_MAX:
            return False
        self.ENTRY.pack_into(self._map(), self._entries * self._entry_size, rel, position)
        self._set_entries(self._entries + 1)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset`` (Kafka ``OffsetIndex.truncateTo``)."""
        slot = self._largest_lower_bound_slot(offset - self.base_offset)
        if slot < 0:
            self._truncate_to_entries(0)
        elif self._entry(slot)[0] == offset - self.base_offset:
            self._truncate_to_entries(slot)
        else:
            self._truncate_to_entries(slot + 1)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptLogError unless every entry is in range and strictly increasing."""
        self._check_length()
        prev_rel, prev_pos = -1, -1
        for rel, pos in self.iter_entries():
            if rel <= prev_rel or pos <= prev_pos or pos < 0:
                raise CorruptLogError(
                    f"Corrupt offset index {self.path}: entry ({rel}, {pos}) does not follow "
                    f"({prev_rel}, {prev_pos})")
            prev_rel, prev_pos = rel, pos
        if log_size is not None and prev_pos >= max(log_size, 1):
            raise CorruptLogError(
                f"Corrupt offset index {self.path}: position {prev_pos} is beyond the log end {log_size}")


class TimeIndex(_MmapIndex):
    """Sparse map from timestamp to offset (``.timeindex``).

    Format: 12-byte big-endian entries ``timestamp int64 | relativeOffset int32``. An entry
    (T, O) means "the largest timestamp seen up to offset O is T", so timestamps are strictly
    increasing and offsets never decrease. One slot is always kept free so that rolling the
    segment can record its final max timestamp (Kafka ``TimeIndex.isFull``).
    """

    ENTRY = struct.Struct(">qi")
    KIND = "time index"
    SPARE_ENTRIES = 1

    def entry(self, slot: int) -> TimestampOffset:
        """Absolute (timestamp, offset) of entry ``slot``."""
        ts, rel = self._entry(slot)
        return ts, self.base_offset + rel

    @property
    def last_entry(self) -> TimestampOffset:
        """Last (timestamp, offset), or ``(-1, base_offset)`` when empty."""
        if self._entries == 0:
            return -1, self.base_offset
        return self.entry(self._entries - 1)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Greatest entry with timestamp <= target; ``(-1, base_offset)`` when there is none."""
        slot = self._largest_lower_bound_slot(target_timestamp)
        return (-1, self.base_offset) if slot < 0 else self.entry(slot)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Add (timestamp, offset) if the timestamp grows; False when ignored."""
        if timestamp < 0:
            return False
        rel = self._relative(offset)
        if self._entries:
            last_ts, last_rel = self._entry(self._entries - 1)
            if timestamp <= last_ts or rel < last_rel:
                return False
        if self._entries >= self.max_entries or (self.is_full and not skip_full_check):
            return False
        self.ENTRY.pack_into(self._map(), self._entries * self._entry_size, timestamp, rel)
        self._set_entries(self._entries + 1)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        target = offset - self.base_offset
        slot = self._largest_lower_bound_slot(target, field=1)
        if slot < 0:
            self._truncate_to_entries(0)
        elif self._entry(slot)[1] == target:
            # Several entries may share an offset; keep none of them.
            while slot > 0 and self._entry(slot - 1)[1] == target:
                slot -= 1
            self._truncate_to_entries(slot)
        else:
            self._truncate_to_entries(slot + 1)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptLogError unless timestamps strictly increase and offsets never decrease."""
        self._check_length()
        prev_ts, prev_rel = -1, 0
        for ts, rel in self.iter_entries():
            if ts <= prev_ts or rel < prev_rel:
                raise CorruptLogError(
                    f"Corrupt time index {self.path}: entry ({ts}, {rel}) does not follow "
                    f"({prev_ts}, {prev_rel})")
            prev_ts, prev_rel = ts, rel
