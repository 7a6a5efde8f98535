"""The producer snapshot's own codec writes and reads the bytes the generated ``ProducerSnapshot`` v1
message gave (what earlier versions of pybroker, and Kafka, put on disk)."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from pybroker.log.producer_snapshot import read_snapshot, snapshot_path, write_snapshot
from pybroker.log.producer_state import BatchMetadata, ProducerStateEntry
from pybroker.protocol.messages import ProducerSnapshot

_ENTRIES = [
    ProducerSnapshot.ProducerEntry(producer_id=7, epoch=3, last_sequence=41, last_offset=1_000_000_123,
                                   offset_delta=4, timestamp=1_700_000_000_123, coordinator_epoch=9,
                                   current_txn_first_offset=1_000_000_100),
    ProducerSnapshot.ProducerEntry(producer_id=2**40, epoch=0, last_sequence=-1, last_offset=-1, offset_delta=0,
                                   timestamp=-1, coordinator_epoch=-1, current_txn_first_offset=-1),
]


def _generated_file(entries: list[ProducerSnapshot.ProducerEntry]) -> bytes:
    body = bytearray(struct.pack(">h", 1) + ProducerSnapshot(crc=0, producer_entries=entries).encode(1))
    struct.pack_into(">I", body, 2, crc32c.crc32c(bytes(body[6:])))
    return bytes(body)


def test_a_snapshot_written_with_the_generated_codec_loads(tmp_path: Path) -> None:
    path = snapshot_path(str(tmp_path), 1_000_000_124)
    Path(path).write_bytes(_generated_file(_ENTRIES))
    loaded = read_snapshot(path)
    assert loaded is not None
    first, second = loaded
    assert (first.producer_id, first.epoch, first.coordinator_epoch, first.last_timestamp,
            first.current_txn_first_offset) == (7, 3, 9, 1_700_000_000_123, 1_000_000_100)
    assert list(first.batches) == [BatchMetadata(37, 41, 1_000_000_119, 1_000_000_123, 1_700_000_000_123)]
    assert (second.producer_id, list(second.batches), second.current_txn_first_offset) == (2**40, [], None)


def test_the_written_bytes_are_the_generated_codecs(tmp_path: Path) -> None:
    entries = [ProducerStateEntry(7, 3, last_timestamp=1_700_000_000_123, coordinator_epoch=9,
                                  current_txn_first_offset=1_000_000_100),
               ProducerStateEntry(2**40, 0, last_timestamp=-1, coordinator_epoch=-1)]
    entries[0].batches.append(BatchMetadata(37, 41, 1_000_000_119, 1_000_000_123, 1_700_000_000_123))
    write_snapshot(str(tmp_path), 5, entries)
    assert Path(snapshot_path(str(tmp_path), 5)).read_bytes() == _generated_file(_ENTRIES)


def test_a_truncated_or_negative_count_snapshot_is_refused(tmp_path: Path) -> None:
    whole = _generated_file(_ENTRIES)
    for cut in (whole[:-1], whole[:8]):
        body = bytearray(cut)
        struct.pack_into(">I", body, 2, crc32c.crc32c(bytes(body[6:])))
        Path(tmp_path / "s.snapshot").write_bytes(body)
        assert read_snapshot(str(tmp_path / "s.snapshot")) is None
    body = bytearray(whole[:6] + struct.pack(">i", -1))
    struct.pack_into(">I", body, 2, crc32c.crc32c(bytes(body[6:])))
    Path(tmp_path / "s.snapshot").write_bytes(body)
    assert read_snapshot(str(tmp_path / "s.snapshot")) is None
