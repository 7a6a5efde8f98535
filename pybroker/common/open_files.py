"""The broker's file descriptors: its limit, what it keeps free, and refusing partitions that would not fit.

A partition costs one descriptor per segment at rest (the ``.log``; its indexes are mapped, with their
files closed, as in Kafka). The rest of ``RLIMIT_NOFILE`` goes to connections, replica fetchers, the
log cleaner, flushes (each opens its own descriptors for its fsyncs), checkpoints and ZooKeeper. A
broker that runs out (``EMFILE``) can no longer accept a connection, roll a segment or write a
checkpoint, so partitions are admitted only while ``open.files.headroom`` descriptors stay free.

At start-up the soft limit is raised to the hard one (as ``ulimit -n`` may, unprivileged), once. The
count of open descriptors is read from ``/proc/self/fd`` at most once a second; what was admitted
since is added to it, so requests handled in between cannot both take the last descriptors.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import time
from typing import Callable

__all__ = ["DescriptorBudget", "OpenFilesLimitError", "is_descriptor_exhaustion", "open_descriptors",
           "raise_open_files_limit"]

log = logging.getLogger("pybroker.server")

_MEASURE_INTERVAL_S = 1.0
_EXHAUSTION = (errno.EMFILE, errno.ENFILE)


class OpenFilesLimitError(Exception):
    """POLICY_VIOLATION: creating these partitions would leave the broker without descriptors to serve them."""


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit where allowed (logged); return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # Linux caps descriptors at fs.nr_open whatever the rlimit says
        try:
            with open("/proc/sys/fs/nr_open", encoding="ascii") as handle:
                target = int(handle.read())
        except (OSError, ValueError):
            return soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("Could not raise the open files limit (RLIMIT_NOFILE) from %d to %d: %s", soft, target, exc)
            return soft
        log.info("Raised the open files limit (RLIMIT_NOFILE) from %d to its hard limit %d", soft, target)
        return target
    return soft


def open_descriptors() -> int:
    """How many descriptors this process has open now."""
    return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir itself holds


def is_descriptor_exhaustion(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is EMFILE/ENFILE: out of descriptors, which says
    nothing about the disk."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in _EXHAUSTION:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class DescriptorBudget:
    """Admits new partitions while ``limit - headroom`` descriptors hold them; see the module doc."""

    def __init__(self, limit: int, headroom: int, *, count: Callable[[], int] = open_descriptors,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        #: kept free for connections, replication, the cleaner and flushes; at most a quarter of the limit,
        #: so that a small limit (1,024 is a common default) still leaves room for partitions
        self.headroom = min(headroom, limit // 4)
        self._count = count
        self._clock = clock
        self._measured = 0
        self._measured_at: float | None = None
        self._admitted = 0  # admitted since the last measurement, which may not show them yet

    @property
    def capacity(self) -> int:
        """Descriptors that partitions may use in all."""
        return self.limit - self.headroom

    def in_use(self) -> int:
        """Descriptors open now, as last measured, plus those admitted since."""
        now = self._clock()
        if self._measured_at is None or now - self._measured_at >= _MEASURE_INTERVAL_S:
            self._measured, self._measured_at, self._admitted = self._count(), now, 0
        return self._measured + self._admitted

    def admit(self, partitions: int, what: str, *, count_in: bool = True) -> None:
        """Count ``partitions`` new local partitions (one descriptor each) in, or raise OpenFilesLimitError
        naming the limit when they would not fit; ``what`` names them for the message. Without ``count_in``
        only the check is made (a validate-only request)."""
        if partitions <= 0:
            return
        in_use = self.in_use()
        if in_use + partitions > self.capacity:
            raise OpenFilesLimitError(
                f"Refusing {what}: its {partitions} partition(s) on this broker need {partitions} more open files, "
                f"and {in_use} of the {self.capacity} it allows are in use (open files limit RLIMIT_NOFILE "
                f"{self.limit}, of which {self.headroom} are kept for connections, replication and the log "
                f"cleaner: open.files.headroom). Raise the limit (ulimit -n, LimitNOFILE=) or spread the "
                f"partitions over more brokers.")
        if count_in:
            self._admitted += partitions
