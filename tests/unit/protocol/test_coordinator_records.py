"""Coordinator record schemas (coordinator-records/): exact bytes from RECORDS.md §4 and round trips."""

from __future__ import annotations

import struct

import pytest

from pybroker.protocol.messages import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    ProducerSnapshot,
    TransactionLogKey,
    TransactionLogValue,
)


def _record(version: int, body: bytes) -> bytes:
    """Internal-topic key/value: int16 schema version written by the caller, then the body."""
    return struct.pack(">h", version) + body


def test_offset_commit_key_v1_bytes() -> None:
    key = OffsetCommitKey(group="my-group", topic="orders", partition=0)
    data = _record(1, key.encode(1))
    assert data == bytes.fromhex("0001" "0008" "6d792d67726f7570" "0006" "6f7264657273" "00000000")
    assert OffsetCommitKey.decode(data[2:], 1) == key


def test_offset_commit_value_v3_bytes() -> None:
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="",
                              commit_timestamp=1700000000000)
    data = _record(3, value.encode(3))
    assert data == bytes.fromhex("0003" "000000000000002a" "00000005" "0000" "0000018bcfe56800")
    assert OffsetCommitValue.decode(data[2:], 3) == value


def test_group_metadata_key_v2_bytes() -> None:
    key = GroupMetadataKey(group="my-group")
    data = _record(2, key.encode(2))
    assert data == bytes.fromhex("0002" "0008" "6d792d67726f7570")
    assert GroupMetadataKey.decode(data[2:], 2) == key


@pytest.mark.parametrize("version", [3, 4])
def test_group_metadata_value_round_trip_two_members(version: int) -> None:
    members = [
        GroupMetadataValue.MemberMetadata(
            member_id=f"consumer-{i}", group_instance_id=None if i else "static-0",
            client_id="client", client_host="/127.0.0.1", rebalance_timeout=300000,
            session_timeout=45000, subscription=b"\x00\x01sub", assignment=b"\x00\x01asg")
        for i in range(2)
    ]
    value = GroupMetadataValue(protocol_type="consumer", generation=7, protocol="range",
                               leader="consumer-0", current_state_timestamp=1700000000000,
                               members=members)
    data = value.encode(version)
    assert GroupMetadataValue.decode(data, version) == value
    prefix = b"\x00\x08consumer" if version == 3 else b"\x09consumer"  # v4 is flexible: compact
    assert data.startswith(prefix)


def test_tagged_only_fields_exist_from_their_tagged_versions() -> None:
    value = TransactionLogValue(producer_id=1000, previous_producer_id=999, producer_epoch=3,
                                transaction_timeout_ms=60000, transaction_status=1,
                                transaction_partitions=[TransactionLogValue.PartitionsSchema(
                                    topic="orders", partition_ids=[0, 2])])
    assert TransactionLogValue.decode(value.encode(1), 1) == value
    assert TransactionLogValue.decode(value.encode(0), 0).previous_producer_id == -1


def test_all_record_classes_are_data_schemas() -> None:
    for cls in (GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, OffsetCommitValue,
                ProducerSnapshot, TransactionLogKey, TransactionLogValue):
        assert cls.API_KEY == -1
