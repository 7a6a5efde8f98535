"""The last stable offset never runs ahead of replication: a transaction closed by a marker the
high watermark has not passed yet still holds the LSO at its first offset (Kafka keeps it in
ProducerStateManager's unreplicatedTxns until onHighWatermarkUpdated passes the marker)."""

from __future__ import annotations

from tests.unit.log.logtest_util import NOW, open_log
from tests.unit.log.test_log_transactions import marker, txn_batch


def leader_append(log, data: bytearray) -> int:
    """Append as the leader without moving the high watermark (the followers have not fetched)."""
    return log.append_as_leader(data, leader_epoch=0, now_ms=NOW).first_offset


def test_the_lso_stays_at_the_transaction_until_the_high_watermark_passes_its_marker(tmp_path):
    log = open_log(tmp_path)
    leader_append(log, txn_batch(1, 0, n=3))  # 0-2
    log.set_high_watermark(2)
    assert leader_append(log, marker(1, commit=True)) == 3
    assert log.last_stable_offset == 0  # committed here, but the marker may still be lost
    log.set_high_watermark(3)
    assert log.last_stable_offset == 0  # the marker itself is not replicated yet
    log.set_high_watermark(4)
    assert log.last_stable_offset == 4
    log.close()


def test_an_unreplicated_abort_holds_the_lso_but_indexes_the_lso_of_open_transactions(tmp_path):
    log = open_log(tmp_path)
    leader_append(log, txn_batch(1, 0))  # 0-1
    leader_append(log, txn_batch(2, 0))  # 2-3
    log.set_high_watermark(4)
    leader_append(log, marker(1, commit=False))  # 4
    assert log.last_stable_offset == 0
    aborted = log.collect_aborted(0, 5)
    assert [(a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset) for a in aborted] == [(1, 0, 4, 2)]
    log.set_high_watermark(5)
    assert log.last_stable_offset == 2  # producer 2's transaction is still open
    log.close()


def test_truncating_away_an_unreplicated_marker_reopens_its_transaction(tmp_path):
    log = open_log(tmp_path)
    leader_append(log, txn_batch(1, 0))  # 0-1
    log.set_high_watermark(2)
    leader_append(log, marker(1, commit=True))  # 2, never replicated
    log.truncate_to(2)  # a new leader never had the marker
    log.set_high_watermark(2)
    assert log.last_stable_offset == 0
    assert log.producer_state.ongoing_first_offsets() == {1: 0}
    log.close()

