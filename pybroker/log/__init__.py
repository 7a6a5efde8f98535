"""Partition logs on local disk, in Kafka's on-disk format.

Layers, smallest first (each module's docstring states its file format):
``file_names`` (the segment files' names) and ``index`` (OffsetIndex/TimeIndex over mmap) -> ``header_scan``
(the walk over a .log file's batch headers, the timestamp search) -> ``segment`` (.log + indexes) -> ``segments``
(the ordered list and its floor lookup, Kafka's LogSegments) -> ``loader`` (crash recovery passes)
-> ``local_log`` (LocalLog: roll, read, truncate, flush planning, deletion) -> ``log`` (PartitionLog,
Kafka's UnifiedLog: log start, high watermark, LSO, appends, retention; it answers ``results``' AppendInfo and
FetchInfo and reports I/O errors through ``storage_errors``) -> ``manager`` (all logs of the broker's log dirs).
Beside them: ``producer_state`` checks idempotent sequences, ``producer_log`` applies
batches and markers to it, replays snapshots (``producer_snapshot``) and collects aborted transactions;
``retention`` picks the segments to delete; ``checkpoint`` writes the small text files; ``file_slice``
is what reads hand to the server. The manager's parts: ``dir_loader`` (the logs found at start-up, strays
moved aside), ``log_dirs`` (dirs and their failure), ``future_logs`` (AlterReplicaLogDirs),
``log_deletion`` (deleted logs' directories), ``flush_scheduler`` (flushes off the loop and their waiters),
``cleaner_manager`` (the cleaner's planning and checkpoint), ``dir_checkpoints`` (the checkpoint files).
``cleaner`` (which logs and segments to compact, the swap) and ``compactor`` (key map, per-batch rules,
``.cleaned`` files) implement log compaction. Imports only ``pybroker.records``, ``pybroker.common`` and
the standard library; the server schedules periodic work and runs ``CleaningJob.run`` in a thread.
"""

from __future__ import annotations

from pybroker.log.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile, PartitionMetadataFile
from pybroker.log.cleaner import CleaningJob
from pybroker.log.config import TOPIC_CONFIG_KEYS, LogConfig, TopicConfigKey
from pybroker.log.errors import (
    CorruptLogError,
    CorruptRecordError,
    InvalidLogConfig,
    InvalidProducerEpochError,
    LogClosedError,
    LogError,
    LogStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerStateError,
    RecordTooLargeError,
    SliceUnavailableError,
    UnexpectedAppendOffsetError,
    UnknownProducerIdError,
)
from pybroker.log.file_slice import FileSlice
from pybroker.log.index import OffsetIndex, TimeIndex
from pybroker.log.log import PartitionLog
from pybroker.log.manager import LogManager
from pybroker.log.producer_state import ProducerStateManager, SequenceCheck
from pybroker.log.results import AppendInfo, FetchInfo
from pybroker.log.segment import LogSegment

__all__ = [
    "AppendInfo",
    "CleaningJob",
    "CorruptLogError",
    "CorruptRecordError",
    "FetchInfo",
    "FileSlice",
    "InvalidLogConfig",
    "InvalidProducerEpochError",
    "LeaderEpochCheckpointFile",
    "LogClosedError",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogSegment",
    "LogStorageError",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionLog",
    "PartitionMetadataFile",
    "ProducerStateError",
    "ProducerStateManager",
    "RecordTooLargeError",
    "SequenceCheck",
    "SliceUnavailableError",
    "TOPIC_CONFIG_KEYS",
    "TimeIndex",
    "TopicConfigKey",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
]
