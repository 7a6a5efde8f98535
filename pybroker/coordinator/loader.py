"""Replays ``__consumer_offsets`` record batches into coordinator entries, oldest first.

Control batches (transaction markers) carry no group data and are skipped; a record that does
not decode is logged and skipped rather than stopping the load, as Kafka's loader does for
unknown record types.
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator

from pybroker.coordinator.records import GroupEntry, OffsetEntry, decode_record
from pybroker.protocol.errors import DecodeError
from pybroker.records import RecordsError, iter_batches

log = logging.getLogger("pybroker.coordinator")


def replay(chunks: Iterable[bytes]) -> Iterator[OffsetEntry | GroupEntry]:
    """Entries of every record in ``chunks`` (each a run of whole batches)."""
    for chunk in chunks:
        for batch in iter_batches(chunk):
            if batch.is_control:
                continue
            try:
                records = batch.records()
            except RecordsError as exc:
                log.warning("Skipping an unreadable __consumer_offsets batch at offset %d: %s",
                            batch.base_offset, exc)
                continue
            for record in records:
                if record.key is None:
                    continue
                try:
                    entry = decode_record(record.key, record.value)
                except (DecodeError, ValueError) as exc:
                    log.warning("Skipping __consumer_offsets record at offset %d: %s", record.offset, exc)
                    continue
                if entry is not None:
                    yield entry
