"""Control batches: transaction markers and friends (RECORDS.md §1.4).

A control batch carries one record whose key is ``version int16 + type int16``;
for ABORT/COMMIT markers the value is ``version int16 + coordinatorEpoch int32``
and the batch is flagged both control and transactional with the producer's
id/epoch, like Java's ``MemoryRecords.withEndTransactionMarker``.
"""

from __future__ import annotations

import struct

from .constants import (
    NO_PARTITION_LEADER_EPOCH,
    NO_SEQUENCE,
    ControlRecordType,
    TimestampType,
)
from .errors import CorruptRecordError
from .record import RecordInput, build_batch

__all__ = [
    "ControlRecordType",
    "CONTROL_RECORD_KEY_VERSION",
    "END_TXN_MARKER_VERSION",
    "encode_control_key",
    "parse_control_key",
    "encode_end_txn_marker",
    "parse_end_txn_marker",
    "build_control_batch",
    "build_end_txn_marker",
]

CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")

Buffer = bytes | bytearray | memoryview


def encode_control_key(control_type: ControlRecordType | int) -> bytes:
    """Key of a control record: version 0 + type id."""
    return _KEY.pack(CONTROL_RECORD_KEY_VERSION, control_type)


def parse_control_key(key: Buffer | None) -> tuple[int, int]:
    """-> (version, type id). Newer key versions are tolerated as Java does."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError("control record key shorter than 4 bytes")
    version, ctype = _KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"invalid control record key version {version}")
    return version, ctype


def encode_end_txn_marker(coordinator_epoch: int) -> bytes:
    """Value of an ABORT/COMMIT control record."""
    return _MARKER.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def parse_end_txn_marker(value: Buffer | None) -> tuple[int, int]:
    """-> (version, coordinator epoch) of an ABORT/COMMIT control record value."""
    if value is None or len(value) < _MARKER.size:
        raise CorruptRecordError("end transaction marker value shorter than 6 bytes")
    version, epoch = _MARKER.unpack_from(value, 0)
    if version < 0:
        raise CorruptRecordError(f"invalid end transaction marker version {version}")
    return version, epoch


def build_control_batch(
    control_type: ControlRecordType | int,
    value: bytes | None,
    *,
    producer_id: int,
    producer_epoch: int,
    is_transactional: bool,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A control batch holding a single control record of ``control_type``."""
    rec = RecordInput(encode_control_key(control_type), value, (), timestamp)
    return build_batch(
        [rec],
        base_offset=base_offset,
        timestamp_type=TimestampType.CREATE_TIME,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=True,
    )


def build_end_txn_marker(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """COMMIT/ABORT marker batch as written by WriteTxnMarkers on the partition leader."""
    return build_control_batch(
        ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        encode_end_txn_marker(coordinator_epoch),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        base_offset=base_offset,
        timestamp=timestamp,
        partition_leader_epoch=partition_leader_epoch,
    )
