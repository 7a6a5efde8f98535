"""A byte range of a segment's ``.log`` file, handed to the server for a Fetch response.

A read does not copy record bytes into Python: ``LogSegment.read`` returns a ``FileSlice``
(path, position, size) plus the segment's open descriptor, and the server either copies the
range into the response with ``read()`` or streams it with ``os.sendfile`` (``send``).

Lifetime. The descriptor belongs to the segment (``LogFile``), never to the slice. It stays
open while the segment lives; retention and truncation first rename the files to ``.deleted``
and close the descriptor only ``file.delete.delay.ms`` later (Kafka's grace period for
in-flight reads), and ``close()``/``delete()`` of the log close it at once. After that every
use of the slice raises ``SliceUnavailableError`` (a ``LogError``) instead of touching a
descriptor number the OS may have reused for another file. A slice whose range was cut by a
later truncation raises the same error from ``read()`` (short read). Callers must therefore
ask for ``fileno()`` (or call ``send``) right before each system call, never cache the number
across an ``await``.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

from pybroker.log.errors import LogStorageError, SliceUnavailableError

__all__ = ["FileSlice", "LogFile", "PageCacheMiss", "RangeWarm", "SliceRead", "cached_pread"]

WARM_CHUNK = 1 << 20  # bytes per read when warming a range on an I/O thread
_NOWAIT = getattr(os, "RWF_NOWAIT", 0)


class PageCacheMiss(Exception):
    """A read with ``RWF_NOWAIT`` found a page of ``position``'s range out of the page cache."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


def cached_pread(fd: int, size: int, position: int) -> bytearray | None:
    """``size`` bytes at ``position`` if the page cache holds them all, else None (one ``preadv``
    with ``RWF_NOWAIT``: the loop never waits for the disk). A short answer is a partly cached
    range, or a file that ends early: the caller's blocking read, off the loop, tells which.
    Where the kernel or file system has no ``RWF_NOWAIT`` the read blocks, as a plain pread."""
    buffer = bytearray(size)
    try:
        count = os.preadv(fd, [buffer], position, _NOWAIT)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        count = os.preadv(fd, [buffer], position)
    if count != size:
        return None
    return buffer


class LogFile:
    """The open descriptor of one ``.log`` file, shared by its segment and its slices."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def open(cls, path: str) -> LogFile:
        """Open (creating if needed) for appends and positional reads."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise LogStorageError(f"cannot open {path}: {exc}") from exc
        return cls(path, fd)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def fileno(self) -> int:
        """The descriptor, or SliceUnavailableError once closed."""
        if self._fd is None:
            raise SliceUnavailableError(f"{self.path} is closed (segment deleted or log closed)")
        return self._fd

    def pread(self, size: int, position: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (short at end of file)."""
        fd = self.fileno()
        try:
            return os.pread(fd, size, position)
        except OSError as exc:
            raise LogStorageError(f"read of {self.path} at {position} failed: {exc}") from exc

    def pread_cached(self, size: int, position: int) -> bytes | bytearray:
        """As ``pread``, from the page cache only: PageCacheMiss where a page is not there.

        Only for reads that stay inside the file (header walks bounded by the segment's size):
        a short answer is taken for a miss."""
        try:
            data = cached_pread(self.fileno(), size, position)
        except OSError as exc:
            raise LogStorageError(f"read of {self.path} at {position} failed: {exc}") from exc
        if data is None:
            raise PageCacheMiss(position)
        return data

    def detached_warm(self, position: int, size: int) -> RangeWarm:
        """A call for an I/O thread that reads ``[position, position + size)`` into the page cache,
        on its own descriptor (taken here, on the loop)."""
        try:
            fd = os.dup(self.fileno())
        except OSError as exc:
            raise LogStorageError(f"cannot read {self.path}: {exc}") from exc
        return RangeWarm(self.path, position, size, fd)

    def close(self) -> None:
        """Close the descriptor; idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


@dataclass(frozen=True)
class FileSlice:
    """Whole record batches ``[position, position + size)`` of the ``.log`` file at ``path``."""

    path: str
    position: int
    size: int
    file: LogFile | None = field(default=None, compare=False, repr=False)

    @property
    def end(self) -> int:
        """Byte position just past the slice."""
        return self.position + self.size

    def first(self, size: int) -> FileSlice:
        """The slice's first ``size`` bytes (a response sent in pieces)."""
        return FileSlice(self.path, self.position, size, self.file)

    def after(self, size: int) -> FileSlice:
        """The slice past its first ``size`` bytes."""
        return FileSlice(self.path, self.position + size, self.size - size, self.file)

    def _file(self) -> LogFile:
        if self.file is None:
            raise SliceUnavailableError(f"slice of {self.path} has no open file")
        return self.file

    def fileno(self) -> int:
        """Descriptor to pass to ``os.sendfile``; valid only until control returns to the loop."""
        return self._file().fileno()

    def read(self) -> bytes:
        """The slice's bytes (one pread)."""
        if self.size == 0:
            return b""
        data = self._file().pread(self.size, self.position)
        if len(data) != self.size:
            raise SliceUnavailableError(
                f"{self.path} was truncated: wanted {self.size} bytes at {self.position}, got {len(data)}")
        return data

    def read_cached(self) -> bytes | bytearray | None:
        """The slice's bytes if the page cache holds them all, else None: the caller then reads
        it on an I/O thread (``detached_read``) rather than waiting for the disk on the loop."""
        if self.size == 0:
            return b""
        try:
            return cached_pread(self.fileno(), self.size, self.position)
        except OSError as exc:
            raise LogStorageError(f"read of {self.path} at {self.position} failed: {exc}") from exc

    def detached_read(self) -> SliceRead:
        """The slice's read as a call for an I/O thread, holding its own descriptor (``os.dup``,
        taken here on the loop): the segment closing meanwhile cannot hand it another file."""
        try:
            fd = os.dup(self._file().fileno())
        except OSError as exc:
            raise LogStorageError(f"cannot read {self.path}: {exc}") from exc
        return SliceRead(self.path, self.position, self.size, fd)

    def send(self, out_fd: int, sent: int = 0) -> int:
        """``os.sendfile`` the rest of the slice after ``sent`` bytes to ``out_fd``; returns bytes sent.

        BlockingIOError from a full non-blocking socket propagates to the caller, who retries
        later with the updated ``sent``; a closed segment raises SliceUnavailableError.
        """
        remaining = self.size - sent
        if remaining <= 0:
            return 0
        return os.sendfile(out_fd, self.fileno(), self.position + sent, remaining)


class SliceRead:
    """One pread of a slice on its own descriptor, closed once the read ran (any thread) or, if it
    never runs (its executor call was cancelled first), when the object is collected."""

    def __init__(self, path: str, position: int, size: int, fd: int) -> None:
        self.path, self.position, self.size = path, position, size
        self._fd: int | None = fd

    def __call__(self) -> bytes:
        fd, self._fd = self._fd, None
        if fd is None:
            raise SliceUnavailableError(f"read of {self.path} at {self.position} already ran")
        try:
            data = os.pread(fd, self.size, self.position)
        except OSError as exc:
            raise LogStorageError(f"read of {self.path} at {self.position} failed: {exc}") from exc
        finally:
            os.close(fd)
        if len(data) != self.size:
            raise SliceUnavailableError(
                f"{self.path} was truncated: wanted {self.size} bytes at {self.position}, got {len(data)}")
        return data

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class RangeWarm:
    """Reads a range into the page cache on its own descriptor (closed once run, or when collected
    unrun); what it read is dropped. A file shorter than the range just ends the warm-up."""

    def __init__(self, path: str, position: int, size: int, fd: int) -> None:
        self.path, self.position, self.size = path, position, size
        self._fd: int | None = fd

    def __call__(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        buffer = bytearray(min(WARM_CHUNK, max(self.size, 0)))
        position, end = self.position, self.position + self.size
        try:
            while position < end:
                count = os.preadv(fd, [memoryview(buffer)[:min(WARM_CHUNK, end - position)]], position)
                if count == 0:
                    return
                position += count
        except OSError as exc:
            raise LogStorageError(f"read of {self.path} at {position} failed: {exc}") from exc
        finally:
            os.close(fd)

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
