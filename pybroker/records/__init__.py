"""Kafka magic-v2 record batches: zero-copy views, validation, stamping, codecs.

Self-contained: imports nothing from other ``pybroker`` packages. The broker's
produce/fetch path uses :mod:`.batch` only (header fields, CRC, in-place
stamping); :mod:`.record` decodes/builds individual records for consumers,
tests and the coordinators.
"""

from __future__ import annotations

from .batch import (
    BatchHeader,
    RecordBatch,
    increment_sequence,
    iter_batches,
    scan_batches,
    set_base_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    update_crc,
    validate_batch,
)
from .compression import compress, decompress
from .constants import *  # noqa: F403
from .constants import __all__ as _constants_all
from .control import (
    build_control_batch,
    build_end_txn_marker,
    encode_control_key,
    encode_end_txn_marker,
    parse_control_key,
    parse_end_txn_marker,
)
from .errors import (
    CorruptRecordError,
    RecordsError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from .record import Record, RecordInput, build_batch, decode_records, now_ms

__all__ = [
    *_constants_all,
    "BatchHeader",
    "RecordBatch",
    "increment_sequence",
    "iter_batches",
    "scan_batches",
    "set_base_offset",
    "set_log_append_time",
    "set_max_timestamp",
    "set_partition_leader_epoch",
    "update_crc",
    "validate_batch",
    "compress",
    "decompress",
    "build_control_batch",
    "build_end_txn_marker",
    "encode_control_key",
    "encode_end_txn_marker",
    "parse_control_key",
    "parse_end_txn_marker",
    "CorruptRecordError",
    "RecordsError",
    "RecordTooLargeError",
    "UnsupportedCompressionError",
    "Record",
    "RecordInput",
    "build_batch",
    "decode_records",
    "now_ms",
]
