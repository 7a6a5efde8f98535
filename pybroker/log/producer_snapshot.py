"""Producer-state snapshots: ``<20-digit offset>.snapshot`` files in the partition directory.

Format (Kafka ``ProducerStateManager.writeSnapshot``, RECORDS.md §3.3; the ``ProducerSnapshot`` v1 schema of
Kafka's coordinator records, encoded here with ``struct`` so that the log needs no protocol code)::

    version int16 (1) | crc uint32 | ProducerSnapshot v1 entries (int32 count, then per producer:
    producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta int32,
    timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64)

The CRC-32C covers every byte after the CRC. The file name's offset is the log end offset the
state belongs to: loading the newest snapshot at or below the log end and replaying only the
batches after it gives the same state as replaying the whole log. Only the last batch of each
producer is kept (Kafka does the same), so a duplicate check after a restart reaches back one
batch. Snapshots are written to ``.tmp``, fsynced and renamed, so a file that exists is whole;
one whose CRC does not match is deleted and an older one used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct

from pybroker.log.checkpoint import fsync_dir
from pybroker.log.file_names import filename_prefix, offset_from_filename
from pybroker.log.producer_state import BatchMetadata, ProducerStateEntry
from pybroker.records.crc import crc32c

__all__ = ["SNAPSHOT_SUFFIX", "snapshot_offsets", "write_snapshot", "read_snapshot", "delete_snapshots"]

logger = logging.getLogger("pybroker.log")

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_ENTRIES_OFFSET = _VERSION.size + _CRC.size
_COUNT = struct.Struct(">i")
# producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch, currentTxnFirstOffset
_ENTRY = struct.Struct(">qhiqiqiq")
NO_OFFSET = -1


def snapshot_path(dir_path: str, offset: int) -> str:
    return os.path.join(dir_path, filename_prefix(offset) + SNAPSHOT_SUFFIX)


def snapshot_offsets(dir_path: str) -> list[int]:
    """Offsets of the snapshot files in ``dir_path``, ascending."""
    offsets = []
    for name in os.listdir(dir_path):
        if name.endswith(SNAPSHOT_SUFFIX):
            try:
                offsets.append(offset_from_filename(name))
            except ValueError:
                continue
    return sorted(offsets)


def write_snapshot(dir_path: str, offset: int, entries: list[ProducerStateEntry], *, sync: bool = True) -> None:
    """Write ``<offset>.snapshot`` via a temporary file; ``sync=False`` leaves the fsyncs to the
    log flush that reaches ``offset`` (a damaged unsynced file fails its CRC and is skipped)."""
    body = bytearray(_VERSION.pack(SNAPSHOT_VERSION) + _CRC.pack(0) + _COUNT.pack(len(entries)))
    for e in entries:
        body += _ENTRY.pack(
            e.producer_id, e.epoch, e.last_seq, e.last_offset,
            (e.batches[-1].last_offset - e.batches[-1].first_offset) if e.batches else 0,
            e.last_timestamp, e.coordinator_epoch,
            NO_OFFSET if e.current_txn_first_offset is None else e.current_txn_first_offset)
    _CRC.pack_into(body, _VERSION.size, crc32c(bytes(body[_ENTRIES_OFFSET:])))
    path = snapshot_path(dir_path, offset)
    with open(path + ".tmp", "wb") as f:
        f.write(body)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    if sync:
        fsync_dir(dir_path)


def read_snapshot(path: str) -> list[ProducerStateEntry] | None:
    """The entries of a snapshot file, or None when it is damaged (the caller falls back)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _ENTRIES_OFFSET:
        return None
    (version,) = _VERSION.unpack_from(data)
    (crc,) = _CRC.unpack_from(data, _VERSION.size)
    if version != SNAPSHOT_VERSION or crc != crc32c(data[_ENTRIES_OFFSET:]):
        return None
    first = _ENTRIES_OFFSET + _COUNT.size
    if len(data) < first:
        return None
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    if count < 0 or len(data) < first + count * _ENTRY.size:
        return None
    entries = []
    for (producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp, coordinator_epoch,
         txn_first_offset) in _ENTRY.iter_unpack(data[first:first + count * _ENTRY.size]):
        entry = ProducerStateEntry(producer_id, epoch, last_timestamp=timestamp, coordinator_epoch=coordinator_epoch,
                                   current_txn_first_offset=None if txn_first_offset < 0 else txn_first_offset)
        if last_sequence >= 0 and last_offset >= 0:
            entry.batches.append(BatchMetadata(last_sequence - offset_delta, last_sequence,
                                               last_offset - offset_delta, last_offset, timestamp))
        entries.append(entry)
    return entries


def delete_snapshots(dir_path: str, *, below: int | None = None, above: int | None = None) -> None:
    """Remove snapshots with an offset < ``below`` or > ``above``."""
    for offset in snapshot_offsets(dir_path):
        if (below is not None and offset < below) or (above is not None and offset > above):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(snapshot_path(dir_path, offset))
