"""Opening a partition directory: crash recovery in numbered passes (Kafka ``LogLoader.load``).

1. Delete files left in flight: ``*.deleted`` (retention/truncation), ``*.cleaned`` (a cleaner
   run that did not finish), ``*.tmp`` (checkpoint writes), and index files without a ``.log``.
   A ``.swap`` whose base offset is at or above the lowest ``.cleaned`` base offset belongs to a
   cleaner pass that had not finished renaming its outputs, and is deleted too (Kafka's
   KAFKA-6264 rule; the cleaner renames its outputs to ``.swap`` in ascending order).
2. Finish interrupted swaps: a ``X.log.swap`` is a complete, fsynced replacement written by the
   cleaner (``cleaner.py``), so the segments whose base offsets lie in [X, last offset of the
   swap] are removed and it is renamed to ``X.log``; index ``.swap`` files are dropped and the
   indexes rebuilt in pass 3 (a segment without index files is recovered).
3. Open every ``<20 digits>.log`` in base-offset order. A non-empty segment whose index files
   are missing, or whose indexes fail ``sanity_check``, is recovered (indexes rebuilt) even
   after a clean shutdown.
4. After an unclean shutdown, recover every segment from the one holding the recovery point
   onward. After a clean one too when the active segment does not end where the shutdown left it
   (its last batches do not end exactly at the end of the file, or it ends below the recovery
   point): a file changed behind the broker's back is scanned, never cut back to its base offset.
   Recovery means: re-validate each batch, rebuild indexes, cut a torn tail. If a segment loses bytes,
   every later segment is deleted, because data after a corrupt batch was never acknowledged
   as durable.
5. Ensure there is an active segment (a new one at the log start offset if the directory was
   empty or everything is below the checkpointed log start) and preallocate its indexes.

Every truncation is logged on the ``pybroker.log`` logger with the file and the byte count.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from dataclasses import dataclass

from pybroker.log.config import LogConfig
from pybroker.log.errors import CorruptLogError
from pybroker.log.file_names import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    filename_prefix,
    offset_from_filename,
)
from pybroker.log.segment import LogSegment
from pybroker.records.constants import BATCH_HEADER, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD

__all__ = ["LoadedLog", "load_segments"]

logger = logging.getLogger("pybroker.log")

TMP_SUFFIX = ".tmp"


@dataclass
class LoadedLog:
    """Result of loading: segments in base-offset order (last = active) and the offsets."""

    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix after the 20 digits) of a segment file name, or None."""
    try:
        return offset_from_filename(name), name[20:]
    except ValueError:
        return None


def _delete_segment_files(dir_path: str, base_offset: int) -> None:
    prefix = os.path.join(dir_path, filename_prefix(base_offset))
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        _unlink(prefix + suffix)


def _last_offset_in_file(path: str) -> int:
    """Last offset of the complete batches at the start of ``path`` (headers only), -1 if none."""
    last = -1
    fd = os.open(path, os.O_RDONLY)
    try:
        size, pos = os.fstat(fd).st_size, 0
        while pos + RECORD_BATCH_OVERHEAD <= size:
            header = os.pread(fd, RECORD_BATCH_OVERHEAD, pos)
            if len(header) < RECORD_BATCH_OVERHEAD:
                break
            fields = BATCH_HEADER.unpack_from(header)
            base, length, delta = fields[0], fields[1], fields[6]
            if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or pos + length + LOG_OVERHEAD > size:
                break
            last = base + delta
            pos += length + LOG_OVERHEAD
    finally:
        os.close(fd)
    return last


def _clean_temporary_files(dir_path: str) -> tuple[list[str], list[str]]:
    """Pass 1; returns the ``.swap`` file names for pass 2 and the file names it found (it deletes no
    ``.log``). One listing, whose entries say which are files without a stat each: a broker opens thousands."""
    with os.scandir(dir_path) as listing:
        files = {entry.name: entry.path for entry in listing if entry.is_file()}
    names = list(files)
    swaps: list[str] = []
    logs = {n[: -len(LOG_SUFFIX)] for n in names if n.endswith(LOG_SUFFIX)}
    cleaned = [p[0] for n in names if n.endswith(CLEANED_SUFFIX) and (p := _segment_file_name(n))]
    min_cleaned = min(cleaned, default=None)
    for name in names:
        path = files[name]
        parsed = _segment_file_name(name)
        if (name.endswith(SWAP_SUFFIX) and min_cleaned is not None and parsed is not None
                and parsed[0] >= min_cleaned):
            logger.info("Deleting swap file %s of a cleaner pass that did not finish", path)
            _unlink(path)
        elif name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, TMP_SUFFIX)):
            logger.info("Deleting stray temporary file %s", path)
            _unlink(path)
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(name)
        elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)) and _segment_file_name(name):
            if name.rsplit(".", 1)[0] not in logs:
                logger.info("Deleting index file %s that has no log file", path)
                _unlink(path)
    return swaps, names


def _complete_swaps(dir_path: str, swaps: list[str]) -> None:
    """Pass 2: install each ``X.log.swap`` in place of the segments it replaces."""
    existing = sorted(p[0] for n in os.listdir(dir_path)
                      if n.endswith(LOG_SUFFIX) and (p := _segment_file_name(n)) is not None)
    for name in sorted(swaps):
        path = os.path.join(dir_path, name)
        parsed = _segment_file_name(name)
        if parsed is None or parsed[1] != LOG_SUFFIX + SWAP_SUFFIX:
            _unlink(path)  # index swaps are rebuilt from the log
            continue
        base = parsed[0]
        last = max(_last_offset_in_file(path), base)
        for old in existing:
            if base <= old <= last:
                logger.info("Deleting segment %d of %s replaced by swap file %s", old, dir_path, name)
                _delete_segment_files(dir_path, old)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            _unlink(os.path.join(dir_path, filename_prefix(base) + suffix))
        os.rename(path, path[: -len(SWAP_SUFFIX)])
        logger.info("Completed swap of %s", path)


def _recover(segment: LogSegment, config: LogConfig, reason: str) -> int:
    logger.info("Recovering segment %s (%s)", segment.log_path, reason)
    truncated = segment.recover(config.max_message_bytes)
    if truncated:
        logger.warning("Truncated %d bytes of invalid data from %s", truncated, segment.log_path)
    return truncated


def _clean_state_holds(active: LogSegment, recovery_point: int) -> bool:
    """After a clean shutdown the recovery point is the log end: the active segment must reach it."""
    return active.tail_is_intact() and active.next_offset >= recovery_point


def load_segments(dir_path: str, config: LogConfig, *, now_ms: int, recovery_point: int,
                  log_start_offset: int, clean_shutdown: bool) -> LoadedLog:
    """Run passes 1-5 on ``dir_path`` (created if missing); see the module doc."""
    os.makedirs(dir_path, exist_ok=True)
    swaps, names = _clean_temporary_files(dir_path)
    if swaps:
        _complete_swaps(dir_path, swaps)
        names = os.listdir(dir_path)

    bases = sorted(p[0] for n in names
                   if n.endswith(LOG_SUFFIX) and (p := _segment_file_name(n)) is not None
                   and p[1] == LOG_SUFFIX)
    # Segments from this index on are recovered in pass 4 anyway (unclean shutdown only).
    first_unflushed = len(bases) if clean_shutdown else max(0, bisect_right(bases, recovery_point) - 1)

    segments: list[LogSegment] = []
    for i, base in enumerate(bases):  # pass 3
        try:
            segment = LogSegment.open(dir_path, base, config, created_ms=now_ms)
        except BaseException:
            for opened in segments:  # out of descriptors, say: give back those this load took
                opened.release()
            raise
        segments.append(segment)
        if i >= first_unflushed:
            continue
        if segment.size > 0 and not segment.indexes_existed:
            logger.error("Could not find index files of %s; rebuilding them", segment.log_path)
            _recover(segment, config, "missing index")
            segment.roll_close()
            continue
        try:
            segment.sanity_check()
        except CorruptLogError as exc:
            logger.warning("Found a corrupt index for %s: %s; rebuilding it", segment.log_path, exc)
            _recover(segment, config, "corrupt index")
            segment.roll_close()

    if clean_shutdown and segments and not _clean_state_holds(segments[-1], recovery_point):
        first_unflushed = max(0, bisect_right(bases, min(recovery_point, segments[-1].base_offset)) - 1)
        logger.warning("The active segment %s does not match the clean shutdown that closed it (recovery "
                       "point %d); recovering from segment %d", segments[-1].log_path, recovery_point,
                       bases[first_unflushed])

    for i in range(first_unflushed, len(segments)):  # pass 4
        truncated = _recover(segments[i], config, "unflushed after unclean shutdown")
        if i < len(segments) - 1:
            segments[i].roll_close()
        if truncated:
            for later in segments[i + 1:]:
                logger.warning("Deleting segment %s which follows a corrupt segment", later.log_path)
                later.delete()
            del segments[i + 1:]
            break

    log_end = segments[-1].next_offset if segments else log_start_offset
    if segments and log_end < log_start_offset:
        logger.info("Log end offset %d of %s is below the checkpointed log start offset %d; "
                    "deleting all segments", log_end, dir_path, log_start_offset)
        for segment in segments:
            segment.delete()
        segments = []
    if not segments:  # pass 5
        segments.append(LogSegment.open(dir_path, log_start_offset, config, created_ms=now_ms, active=True))
        log_end = log_start_offset
    else:
        segments[-1].make_active()
        log_end = segments[-1].next_offset
    log_start = max(log_start_offset, segments[0].base_offset)
    if log_end < recovery_point:
        logger.error("Log end offset %d of %s is below its checkpointed recovery point %d: data that was "
                     "flushed is missing from the files", log_end, dir_path, recovery_point)
    recovery = log_end if clean_shutdown else min(recovery_point, log_end)
    return LoadedLog(segments, log_start, log_end, recovery)
