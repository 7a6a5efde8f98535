"""A share-partition's counters (read by /metrics): records acquired, acknowledged per type (one type per batch or
one per offset, counted by the handler once the acknowledgement took effect), archived (by a lock timeout at the
delivery count limit here; by a REJECT or a RELEASE at the limit in the handler, once written:
tests/unit/server/test_share_ack_rollback.py), and lock timeouts; refused acknowledgements count nothing."""

from __future__ import annotations

from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.share.partition import AckType, BatchBounds, SharePartition

LOCK_MS = 1000


def test_counters_follow_each_transition() -> None:
    share = SharePartition(0, delivery_count_limit=2, max_record_locks=100)
    share.acquire("a", [BatchBounds(0, 9)], max_records=100, lock_ms=LOCK_MS, now_ms=0)
    assert share.acknowledge("b", 0, 9, [AckType.ACCEPT], 0) is ErrorCode.INVALID_RECORD_STATE
    types = [AckType.ACCEPT] * 3 + [AckType.RELEASE] * 2 + [AckType.REJECT] + [AckType.ACCEPT] * 4
    assert share.acknowledge("a", 0, 9, types, 0) is ErrorCode.NONE
    assert share.counters.acknowledged == dict.fromkeys(("Accept", "Release", "Reject", "Renew"), 0)
    share.counters.on_acknowledge(0, 9, types)  # as the handler counts it, once it took effect
    assert share.counters.acknowledged == {"Accept": 7, "Release": 2, "Reject": 1, "Renew": 0}
    assert (share.counters.acquired, share.counters.archived) == (10, 0)  # the REJECT: the handler counts it

    share.written(share.changes)  # the release is durable: offsets 3-4 may be delivered again
    share.acquire("a", [BatchBounds(0, 9)], max_records=100, lock_ms=LOCK_MS, now_ms=0)  # offsets 3-4 again
    assert share.counters.acquired == 12
    assert share.expire(LOCK_MS) == 1  # their second delivery times out: archived at the limit of 2
    assert (share.counters.lock_timeouts, share.counters.archived) == (2, 2)
    share.written(share.changes)  # the window moves on once all of it is written
    assert share.in_flight() == 0
