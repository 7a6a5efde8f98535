"""A request whose ``__transaction_state`` record failed is answered as Kafka's
TransactionStateManager.appendTransactionToLog maps the append's error: the coordinator used to answer every
failure COORDINATOR_NOT_AVAILABLE, a lost leadership included (Kafka: NOT_COORDINATOR, so the client looks the
coordinator up again instead of retrying the old one)."""

from __future__ import annotations

import pytest

from pybroker.log.errors import LogError
from pybroker.protocol.error_codes import ErrorCode
from pybroker.records.errors import RecordTooLargeError
from pybroker.replication.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    ReplicaTimeoutError,
    UnknownPartitionError,
)
from pybroker.server.handlers.txn import append_error


@pytest.mark.parametrize(("cause", "code"), [
    (ReplicaTimeoutError("timed out"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (NotEnoughReplicasError("isr"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (NotEnoughReplicasAfterAppendError("isr"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (UnknownPartitionError("gone"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (NotLeaderError("moved"), ErrorCode.NOT_COORDINATOR),
    (LogError("disk"), ErrorCode.NOT_COORDINATOR),
    (RecordTooLargeError("big"), ErrorCode.UNKNOWN_SERVER_ERROR),
    (None, ErrorCode.COORDINATOR_NOT_AVAILABLE),
])
def test_append_errors_are_answered_as_kafka_maps_them(cause: BaseException | None, code: ErrorCode) -> None:
    assert append_error(cause) is code
