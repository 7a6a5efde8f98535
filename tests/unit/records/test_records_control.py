"""Control batches / transaction markers, checked against kafka-python and aiokafka."""

from __future__ import annotations

import pytest
from aiokafka.record import default_records as aio_default
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER
from aiokafka.record.control_record import ControlRecord as AioControlRecord
from kafka.record.default_records import DefaultRecordBatch as KpBatch

from pybroker.records import (
    ControlRecordType,
    CorruptRecordError,
    build_control_batch,
    build_end_txn_marker,
    encode_control_key,
    parse_control_key,
    parse_end_txn_marker,
    validate_batch,
)

TS = 1_700_000_000_000


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_marker(commit: bool) -> None:
    data = build_end_txn_marker(
        commit,
        producer_id=77,
        producer_epoch=4,
        coordinator_epoch=12,
        base_offset=500,
        timestamp=TS,
        partition_leader_epoch=3,
    )
    b = validate_batch(data)
    assert b.is_control and b.is_transactional
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (77, 4, -1)
    assert (b.base_offset, b.partition_leader_epoch, b.records_count) == (500, 3, 1)
    (rec,) = b.records()
    assert rec.offset == 500 and rec.timestamp == TS
    assert parse_control_key(rec.key) == (0, ControlRecordType.COMMIT if commit else 0)
    assert parse_end_txn_marker(rec.value) == (0, 12)
    assert rec.key == b"\x00\x00\x00" + (b"\x01" if commit else b"\x00")
    assert rec.value == b"\x00\x00\x00\x00\x00\x0c"

    kp = KpBatch(data)
    assert kp.validate_crc() and kp.is_control_batch and kp.is_transactional
    (kr,) = list(kp)
    assert kr.commit is commit and kr.abort is (not commit)

    for reader in (aio_default.DefaultRecordBatch, aio_default._DefaultRecordBatchPy):
        ab = reader(data)
        assert ab.validate_crc() and ab.is_control_batch
        (ar,) = list(ab)
        assert AioControlRecord.parse(ar.key) == (COMMIT_MARKER if commit else ABORT_MARKER)


def test_generic_control_batch_and_parsing_errors() -> None:
    data = build_control_batch(
        ControlRecordType.LEADER_CHANGE,
        b"payload",
        producer_id=-1,
        producer_epoch=-1,
        is_transactional=False,
    )
    b = validate_batch(data)
    assert b.is_control and not b.is_transactional
    assert parse_control_key(b.records()[0].key) == (0, 2)
    assert encode_control_key(ControlRecordType.SNAPSHOT_FOOTER) == b"\x00\x00\x00\x04"
    for bad in (None, b"\x00\x00"):
        with pytest.raises(CorruptRecordError):
            parse_control_key(bad)
        with pytest.raises(CorruptRecordError):
            parse_end_txn_marker(bad)
