"""glibc's allocator set for big produce batches, at `pybroker serve` start (the broker's own process only).

glibc serves a request above ``M_MMAP_THRESHOLD`` (128 KiB, then raised to the largest block freed, up to
32 MiB) with its own mapping and returns it at ``free``, and gives back the top of its heap above
``M_TRIM_THRESHOLD`` (twice that). A broker receiving batches of a megabyte or more (the request frame, an lz4
batch's decompressed records, the copy checked on a worker thread) maps, faults in and returns fresh pages for
each. With both thresholds fixed (8 MiB, 32 MiB) those buffers come from the heap, whose freed memory is kept
for the next batch: up to 32 MiB of free memory per arena stays resident, in exchange for the page faults.

Only ``serve`` calls :func:`tune` (an embedded broker is a ``serve`` child process too), so a process that
imports pybroker as a library keeps its allocator as it was. Environment settings of either threshold (glibc's
``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` or ``GLIBC_TUNABLES``) win: nothing is changed then,
which is also how to keep glibc's defaults (``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072``). Other C
libraries (musl, macOS) are left alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["M_MMAP_THRESHOLD", "M_TRIM_THRESHOLD", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "ENVIRONMENT", "is_glibc", "tune"]

#: ``mallopt`` parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap: a produce request of ``message.max.bytes``-sized batches and its
#: decompressed records stay below it.
MMAP_THRESHOLD = 8 << 20
#: Free memory at the top of the heap kept for the next batches, per arena.
TRIM_THRESHOLD = 32 << 20
#: Environment variables through which the user (or glibc's defaults, on purpose) already decided.
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")


def is_glibc() -> bool:
    """glibc names itself in confstr; musl and macOS do not know the name."""
    try:
        return sys.platform.startswith("linux") and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):
        return False


def tune() -> str:
    """Fix glibc's mmap and trim thresholds for this process, unless the environment set them or the C library
    is not glibc; what was done, for the start-up log."""
    if not is_glibc():
        return "the C library's defaults (not glibc)"
    chosen = [name for name in ENVIRONMENT if name in os.environ]
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    chosen += [name for name in _TUNABLES if name in tunables]
    if chosen:
        return f"glibc malloc as the environment sets it ({', '.join(chosen)})"
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "glibc malloc's defaults (mallopt refused the thresholds)"
    return f"glibc malloc, mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold {TRIM_THRESHOLD >> 20} MiB"
