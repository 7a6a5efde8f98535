"""Layout constants and enums of the magic-v2 record batch (RECORDS.md §1).

Lives in its own module so that ``batch`` and ``record`` can both import it
without an import cycle; ``batch`` re-exports everything.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

__all__ = [
    "Compression",
    "TimestampType",
    "ControlRecordType",
    "BATCH_HEADER",
    "RECORD_BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "BASE_OFFSET_OFFSET",
    "LENGTH_OFFSET",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "CRC_OFFSET",
    "ATTRIBUTES_OFFSET",
    "LAST_OFFSET_DELTA_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "PRODUCER_ID_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "MIN_BATCH_LENGTH",
    "MIN_LEGACY_ENTRY_LENGTH",
    "CURRENT_MAGIC",
    "COMPRESSION_CODEC_MASK",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "CONTROL_FLAG_MASK",
    "DELETE_HORIZON_FLAG_MASK",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_TIMESTAMP",
    "MAX_RECORD_OVERHEAD",
]


class Compression(IntEnum):
    """Codec id stored in attribute bits 0-2 (Java ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Attribute bit 3: who set the timestamps of the batch."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """Type id in a control record key (Java ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordsCount
BATCH_HEADER: Final = struct.Struct(">qiibIhiqqqhii")

BASE_OFFSET_OFFSET: Final = 0
LENGTH_OFFSET: Final = 8
PARTITION_LEADER_EPOCH_OFFSET: Final = 12
MAGIC_OFFSET: Final = 16
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
LAST_OFFSET_DELTA_OFFSET: Final = 23
BASE_TIMESTAMP_OFFSET: Final = 27
MAX_TIMESTAMP_OFFSET: Final = 35
PRODUCER_ID_OFFSET: Final = 43
PRODUCER_EPOCH_OFFSET: Final = 51
BASE_SEQUENCE_OFFSET: Final = 53
RECORDS_COUNT_OFFSET: Final = 57
RECORDS_OFFSET: Final = 61

RECORD_BATCH_OVERHEAD: Final = 61
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength
MIN_BATCH_LENGTH: Final = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # 49
# Smallest legal value of the length field for *any* magic (v0 message:
# crc+magic+attrs+key len+value len); below this the log is garbage.
MIN_LEGACY_ENTRY_LENGTH: Final = 14
CURRENT_MAGIC: Final = 2

COMPRESSION_CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG_MASK: Final = 0x10
CONTROL_FLAG_MASK: Final = 0x20
DELETE_HORIZON_FLAG_MASK: Final = 0x40

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
NO_TIMESTAMP: Final = -1

# length varint(5) + attributes(1) + timestampDelta varlong(10) + offsetDelta varint(5)
MAX_RECORD_OVERHEAD: Final = 21

assert BATCH_HEADER.size == RECORD_BATCH_OVERHEAD
