"""Replays ``__consumer_offsets`` record batches into coordinator entries, oldest first.

Offsets written by TxnOffsetCommit sit in transactional batches: they are held per producer id
until that producer's marker, then yielded (COMMIT) or dropped (ABORT); those still open at the
end come out as ``PendingTxnOffset``. A record that does not decode is logged and skipped rather
than stopping the load, as Kafka's loader does for unknown record types.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Iterator, TypeVar

from pybroker.coordinator.records import Entry, OffsetEntry, PendingTxnOffset, decode_record
from pybroker.protocol.errors import DecodeError
from pybroker.records import ControlRecordType, RecordBatch, RecordsError, iter_batches, parse_control_key

log = logging.getLogger("pybroker.coordinator")

T = TypeVar("T")


def replay(chunks: Iterable[bytes]) -> Iterator[Entry | PendingTxnOffset]:
    """Entries of every record in ``chunks`` (each a run of whole batches)."""
    open_txns: dict[int, list[Entry]] = {}
    for chunk in chunks:
        for batch in iter_batches(chunk):
            if batch.is_control:
                committed = open_txns.pop(batch.producer_id, [])
                if _is_commit(batch):
                    yield from committed
                continue
            entries = _entries(batch)
            if batch.is_transactional:
                open_txns.setdefault(batch.producer_id, []).extend(entries)
            else:
                yield from entries
    for producer_id, entries in open_txns.items():
        for entry in entries:
            if isinstance(entry, OffsetEntry):
                yield PendingTxnOffset(producer_id, entry)


def _entries(batch: RecordBatch) -> list[Entry]:
    return decoded_records(batch, decode_record, "__consumer_offsets")


def decoded_records(batch: RecordBatch, decode: Callable[[bytes, bytes | None], T | None], topic: str) -> list[T]:
    """``decode(key, value)`` of each keyed record of an internal-topic batch; records (or a whole
    batch) that do not decode are logged and skipped."""
    try:
        records = batch.records()
    except RecordsError as exc:
        log.warning("Skipping an unreadable %s batch at offset %d: %s", topic, batch.base_offset, exc)
        return []
    entries: list[T] = []
    for record in records:
        if record.key is None:
            continue
        try:
            entry = decode(record.key, record.value)
        except (DecodeError, ValueError) as exc:
            log.warning("Skipping %s record at offset %d: %s", topic, record.offset, exc)
            continue
        if entry is not None:
            entries.append(entry)
    return entries


def _is_commit(batch: RecordBatch) -> bool:
    try:
        records = batch.records()
        return bool(records) and parse_control_key(records[0].key)[1] == ControlRecordType.COMMIT
    except RecordsError:
        return False
