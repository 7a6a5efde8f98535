"""Transaction metadata and its records in ``__transaction_state``, byte-compatible with Kafka.

Key = ``int16 0`` + ``TransactionLogKey(transactionalId)``; value = ``int16 0`` +
``TransactionLogValue`` v0 for a transaction of a V0/V1 client, ``int16 1`` + v1 (flexible, with the
tagged ClientTransactionVersion, PreviousProducerId and NextProducerId) for a transactions V2 client
(KIP-890 part 2), as Kafka writes them; or null = tombstone (the transactional id expired). The partition of a
transactional id is ``abs(javaHashCode(id)) % transaction.state.log.num.partitions``.

States and their ids are Kafka's (``TransactionState.java``)::

    Empty(0) -> Ongoing(1) -> PrepareCommit(2) | PrepareAbort(3) -> CompleteCommit(4) | CompleteAbort(5)
    Complete*/Empty -> Ongoing (next transaction)      Dead(6): expired, only as a tombstone
    PrepareEpochFence(7) is never written: a fenced transaction is stored as PrepareAbort.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from pybroker.common.topic import TopicPartition
from pybroker.coordinator.records import Record
from pybroker.protocol.errors import DecodeError
from pybroker.protocol.messages import TransactionLogKey, TransactionLogValue

KEY_VERSION = 0
VALUE_VERSION = 0
V2_VALUE_VERSION = 1
TV_1 = 1
"""Kafka's TransactionVersion of a client that adds partitions itself (AddPartitionsToTxn, EndTxn up to v4)."""
TV_2 = 2
"""Transactions V2 (KIP-890 part 2): partitions added by the leaders, the epoch bumped at every end (EndTxn v5)."""
_VERSION = struct.Struct(">h")


class TxnState(enum.Enum):
    """(state id stored in the log, name reported by Describe/ListTransactions)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def display_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise DecodeError(f"unknown transaction state {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return next((s for s in cls if s.display_name == name), None)




@dataclass(slots=True)
class TxnMetadata:
    """What the coordinator knows of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = -1  # epoch before the last bump: a retried InitProducerId or V2 EndTxn still matches
    client_version: int = TV_1
    """The TransactionVersion the client runs this transaction with (TV_2: the epoch is bumped at its end)."""
    previous_producer_id: int = -1  # V2: the id before the last rotation, so a retried EndTxn still matches
    next_producer_id: int = -1  # V2: the id the producer moves to once this transaction's markers are written

    @property
    def bumps_epoch_at_end(self) -> bool:
        return self.client_version >= TV_2


def txn_key(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + TransactionLogKey(transactional_id=transactional_id).encode(KEY_VERSION)


def txn_record(meta: TxnMetadata) -> Record:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    partitions = None if meta.state is TxnState.EMPTY else [
        TransactionLogValue.PartitionsSchema(topic=topic, partition_ids=ids) for topic, ids in by_topic.items()]
    value = TransactionLogValue(
        producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, transaction_timeout_ms=meta.timeout_ms,
        transaction_status=meta.state.id, transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=meta.last_update_ms, transaction_start_timestamp_ms=meta.start_ms,
        previous_producer_id=meta.previous_producer_id, next_producer_id=meta.next_producer_id,
        client_transaction_version=meta.client_version)
    version = V2_VALUE_VERSION if meta.bumps_epoch_at_end else VALUE_VERSION
    return txn_key(meta.transactional_id), _VERSION.pack(version) + value.encode(version)


@dataclass(frozen=True, slots=True)
class TxnEntry:
    """One replayed record: the metadata, or None for a tombstone."""

    transactional_id: str
    metadata: TxnMetadata | None


def decode_txn_record(key: bytes, value: bytes | None) -> TxnEntry | None:
    """Decode a ``__transaction_state`` record; None for key versions this broker does not know."""
    if len(key) < 2:
        raise DecodeError("__transaction_state key shorter than its version")
    (key_version,) = _VERSION.unpack_from(key)
    if key_version != KEY_VERSION:
        return None
    transactional_id = TransactionLogKey.decode(key[2:], KEY_VERSION).transactional_id
    if value is None:
        return TxnEntry(transactional_id, None)
    (value_version,) = _VERSION.unpack_from(value)
    v = TransactionLogValue.decode(value[2:], min(value_version, TransactionLogValue.MAX_VERSION))
    partitions = {TopicPartition(p.topic, index) for p in v.transaction_partitions or [] for index in p.partition_ids}
    return TxnEntry(transactional_id, TxnMetadata(
        transactional_id=transactional_id, producer_id=v.producer_id, producer_epoch=v.producer_epoch,
        timeout_ms=v.transaction_timeout_ms, state=TxnState.from_id(v.transaction_status), partitions=partitions,
        start_ms=v.transaction_start_timestamp_ms, last_update_ms=v.transaction_last_update_timestamp_ms,
        client_version=max(v.client_transaction_version, TV_1), previous_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id))
