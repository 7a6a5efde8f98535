"""A transaction V2 marker at the last producer epoch, 32767 (Short.MaxValue). A V2 marker must be above the
producer's epoch, but at 32767 there is no epoch above: the coordinator aborts a transaction open there with that
same epoch (KAFKA-20090), and since Kafka's PR #21469 a leader takes a V2 marker at the producer's epoch when that
epoch is Short.MaxValue, open transaction or not (ProducerAppendInfo.checkProducerEpoch). Nothing below 32767
changes, and a follower or a log replayed at open takes such a marker as the leader wrote it."""

from __future__ import annotations

import pytest

from pybroker.log.errors import InvalidProducerEpochError
from pybroker.log.txn_index import AbortedTxn
from tests.unit.log.logtest_util import open_log, read_all
from tests.unit.log.test_log_transactions import append, txn_batch, v2_marker

LAST = 32767
PID = 7


@pytest.mark.parametrize("commit", [False, True])
def test_a_v2_marker_at_the_last_epoch_closes_the_transaction_open_there(tmp_path, commit):
    log = open_log(tmp_path)
    append(log, txn_batch(PID, 0, epoch=LAST))  # 0-1
    assert v2_marker(log, PID, commit=commit, epoch=LAST) == 2
    assert log.last_stable_offset == log.log_end_offset == 3
    assert log.collect_aborted(0, 3) == ([] if commit else [AbortedTxn(PID, 0, 2, 3)])
    entry = log.producer_state.get(PID)
    assert (entry.epoch, entry.current_txn_first_offset) == (LAST, None)
    assert v2_marker(log, PID, commit=commit, epoch=LAST) == 3  # the coordinator's retry, as at any epoch
    log.close()


def test_below_the_last_epoch_a_v2_marker_at_the_open_transactions_epoch_stays_refused(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(PID, 0, epoch=LAST - 1))  # 0-1
    with pytest.raises(InvalidProducerEpochError, match=f"not above the current epoch {LAST - 1}"):
        v2_marker(log, PID, commit=False, epoch=LAST - 1)
    assert log.log_end_offset == 2 and log.last_stable_offset == 0
    assert v2_marker(log, PID, commit=False, epoch=LAST) == 2  # the bumped one closes it
    log.close()


def test_at_the_last_epoch_an_older_v2_marker_stays_refused(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(PID, 0, epoch=LAST))  # 0-1
    with pytest.raises(InvalidProducerEpochError):
        v2_marker(log, PID, commit=False, epoch=LAST - 1)
    assert log.log_end_offset == 2 and log.last_stable_offset == 0
    log.close()


@pytest.mark.parametrize("how", ["follower", "snapshot", "replay"])
def test_the_marker_at_the_last_epoch_is_taken_by_a_follower_and_at_open(tmp_path, how):
    """The follower appends what the leader wrote without the leader's check (Kafka's follower checks the
    marker as a V0 one and only warns); a log opened again rebuilds the same producer state."""
    leader = open_log(tmp_path / "leader")
    append(leader, txn_batch(PID, 0, epoch=LAST))  # 0-1
    v2_marker(leader, PID, commit=False, epoch=LAST)  # 2
    append(leader, txn_batch(PID + 1, 0))  # 3-4: another producer's transaction, still open
    if how == "follower":
        log = open_log(tmp_path / "follower")
        for batch in read_all(leader):
            log.append_as_follower(batch)
        log.set_high_watermark(log.log_end_offset)
    else:
        leader.close()
        if how == "replay":
            (tmp_path / "leader" / "00000000000000000005.snapshot").unlink()
            (tmp_path / "leader" / "00000000000000000000.txnindex").unlink()
        log = open_log(tmp_path / "leader", clean_shutdown=True, high_watermark=5)
    entry = log.producer_state.get(PID)
    assert (entry.epoch, entry.current_txn_first_offset, entry.coordinator_epoch) == (LAST, None, 3)
    assert log.last_stable_offset == 3
    assert log.collect_aborted(0, 5) == [AbortedTxn(PID, 0, 2, 3)]
    log.close()
    if how == "follower":
        leader.close()
