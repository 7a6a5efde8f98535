"""The transaction coordinator's state machine, driven with a manual clock and no I/O."""

from __future__ import annotations

from typing import Any

from pybroker.coordinator.group import CommittedOffset
from pybroker.coordinator.loader import replay
from pybroker.coordinator.records import OffsetEntry, PendingTxnOffset, offset_record
from pybroker.coordinator.txn_coordinator import (
    InitResult,
    MarkerRequest,
    TransactionCoordinator,
    TxnConfig,
    TxnOutcome,
)
from pybroker.coordinator.txn_records import TV_1, TV_2, TxnState, decode_txn_record, txn_key
from pybroker.protocol.error_codes import ErrorCode
from pybroker.records import RecordInput, build_batch, build_end_txn_marker

TXN = "app-txn"
TIMEOUT_MS = 60_000
CONFIG = TxnConfig(abort_check_interval_ms=1_000, id_expiration_ms=3_600_000, expiration_check_interval_ms=60_000)


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def only_reply(outcome: TxnOutcome) -> Any:
    assert len(outcome.replies) == 1
    return outcome.replies[0][1]


def written(coordinator: TransactionCoordinator, marker: MarkerRequest, now: int) -> TxnOutcome:
    """Every marker of ``marker`` is written and the Complete* record that follows is on the ISR."""
    outcome = coordinator.markers_written(marker, now)
    coordinator.persisted(outcome, ok=True)
    return outcome


def complete(coordinator: TransactionCoordinator, outcome: TxnOutcome, now: int) -> list[MarkerRequest]:
    """What the runtime does after persisting: the records are on the ISR, every marker is written and
    acknowledged, and so is the Complete* record."""
    coordinator.persisted(outcome, ok=True)
    for marker in outcome.markers:
        written(coordinator, marker, now)
    return outcome.markers


def init(coordinator: TransactionCoordinator, clock: ManualClock, fresh: int | None = 1000,
         producer_id: int = -1, epoch: int = -1) -> InitResult:
    outcome = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, producer_id, epoch, fresh, clock.now)
    complete(coordinator, outcome, clock.now)
    return only_reply(outcome)


def started(partitions: list[tuple[str, int]] | None = None) -> tuple[TransactionCoordinator, ManualClock, InitResult]:
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    result = init(coordinator, clock)
    outcome = coordinator.add_partitions("w", TXN, result.producer_id, result.producer_epoch,
                                         partitions or [("out", 0), ("out", 1)], clock.now)
    assert only_reply(outcome) is ErrorCode.NONE
    complete(coordinator, outcome, clock.now)
    return coordinator, clock, result


def test_first_init_creates_the_id_at_epoch_zero_and_persists_it():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    outcome = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, 1000, clock.now)
    assert only_reply(outcome) == InitResult(ErrorCode.NONE, 1000, 0)
    [(partition, (key, value))] = outcome.records
    assert partition == coordinator.partition_of(TXN) and key == txn_key(TXN)
    entry = decode_txn_record(key, value)
    assert entry is not None and entry.metadata is not None
    assert (entry.metadata.producer_id, entry.metadata.producer_epoch, entry.metadata.state) == (1000, 0, TxnState.EMPTY)


def test_each_init_bumps_the_epoch_and_fences_the_older_producer():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    first = init(coordinator, clock)
    second = init(coordinator, clock, fresh=None)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    outcome = coordinator.add_partitions("w", TXN, first.producer_id, first.producer_epoch, [("out", 0)], clock.now)
    assert only_reply(outcome) is ErrorCode.PRODUCER_FENCED
    outcome = coordinator.add_partitions("w", TXN, 999, second.producer_epoch, [("out", 0)], clock.now)
    assert only_reply(outcome) is ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_init_during_an_open_transaction_aborts_it_with_a_bumped_epoch():
    coordinator, clock, first = started()
    outcome = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, None, clock.now)
    assert only_reply(outcome).error is ErrorCode.CONCURRENT_TRANSACTIONS
    [marker] = outcome.markers
    assert not marker.commit and marker.producer_epoch == first.producer_epoch + 1
    assert marker.partitions == (("out", 0), ("out", 1))
    complete(coordinator, outcome, clock.now)
    assert coordinator.describe(TXN).state is TxnState.COMPLETE_ABORT
    retried = init(coordinator, clock, fresh=None)
    assert retried.producer_epoch == first.producer_epoch + 2


def test_commit_writes_prepare_then_markers_then_complete():
    coordinator, clock, producer = started()
    outcome = coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch, True, clock.now)
    assert only_reply(outcome) is ErrorCode.NONE
    prepared = decode_txn_record(*outcome.records[0][1])
    assert prepared is not None and prepared.metadata is not None
    assert prepared.metadata.state is TxnState.PREPARE_COMMIT
    assert prepared.metadata.partitions == {("out", 0), ("out", 1)}
    [marker] = outcome.markers
    assert marker.commit and marker.producer_id == producer.producer_id
    coordinator.persisted(outcome, ok=True)  # the PrepareCommit record is on the ISR
    done = written(coordinator, marker, clock.now)
    completed = decode_txn_record(*done.records[0][1])
    assert completed is not None and completed.metadata is not None
    assert completed.metadata.state is TxnState.COMPLETE_COMMIT and not completed.metadata.partitions
    retry = coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch, True, clock.now)
    assert only_reply(retry) is ErrorCode.NONE and not retry.markers
    wrong = coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch, False, clock.now)
    assert only_reply(wrong) is ErrorCode.INVALID_TXN_STATE


def test_end_without_a_transaction_is_an_invalid_state():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    producer = init(coordinator, clock)
    outcome = coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch, True, clock.now)
    assert only_reply(outcome) is ErrorCode.INVALID_TXN_STATE


def test_requests_racing_an_unfinished_commit_are_concurrent():
    coordinator, clock, producer = started()
    coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch, True, clock.now)  # markers pending
    add = coordinator.add_partitions("w", TXN, producer.producer_id, producer.producer_epoch, [("out", 2)], clock.now)
    assert only_reply(add) is ErrorCode.CONCURRENT_TRANSACTIONS
    again = coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch, True, clock.now)
    assert only_reply(again) is ErrorCode.CONCURRENT_TRANSACTIONS


def test_adding_partitions_already_in_the_transaction_writes_nothing():
    coordinator, clock, producer = started()
    outcome = coordinator.add_partitions("w", TXN, producer.producer_id, producer.producer_epoch, [("out", 1)],
                                         clock.now)
    assert only_reply(outcome) is ErrorCode.NONE and not outcome.records


def test_verify_only_checks_membership_without_adding():
    coordinator, clock, producer = started([("out", 0)])
    ok = coordinator.add_partitions("w", TXN, producer.producer_id, producer.producer_epoch, [("out", 0)],
                                    clock.now, verify_only=True)
    missing = coordinator.add_partitions("w", TXN, producer.producer_id, producer.producer_epoch, [("out", 5)],
                                         clock.now, verify_only=True)
    assert only_reply(ok) is ErrorCode.NONE
    assert only_reply(missing) is ErrorCode.TRANSACTION_ABORTABLE and not missing.records
    assert coordinator.describe(TXN).partitions == {("out", 0)}


def test_transaction_past_its_timeout_is_aborted_and_its_producer_fenced():
    coordinator, clock, producer = started()
    assert not coordinator.tick(clock.now).markers
    outcome = coordinator.tick(clock.advance(TIMEOUT_MS + CONFIG.abort_check_interval_ms))
    [marker] = outcome.markers
    assert not marker.commit and marker.producer_epoch == producer.producer_epoch + 1
    complete(coordinator, outcome, clock.now)
    late = coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch, True, clock.now)
    assert only_reply(late) is ErrorCode.PRODUCER_FENCED
    assert coordinator.describe(TXN).state is TxnState.COMPLETE_ABORT


def test_timeout_is_not_hit_before_it_passes():
    coordinator, clock, _ = started()
    coordinator.tick(clock.now)
    assert not coordinator.tick(clock.advance(TIMEOUT_MS - 1)).markers
    assert coordinator.describe(TXN).state is TxnState.ONGOING


def test_invalid_timeout_is_refused():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    outcome = coordinator.init_producer_id("w", TXN, CONFIG.max_timeout_ms + 1, -1, -1, 1000, clock.now)
    assert only_reply(outcome).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT and not outcome.records


def test_kip360_retry_of_a_bump_gets_the_same_epoch_and_a_stale_one_is_fenced():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    first = init(coordinator, clock)
    bumped = init(coordinator, clock, fresh=None, producer_id=first.producer_id, epoch=first.producer_epoch)
    assert bumped.producer_epoch == first.producer_epoch + 1
    retried = init(coordinator, clock, fresh=None, producer_id=first.producer_id, epoch=first.producer_epoch)
    assert retried == bumped
    stale = init(coordinator, clock, fresh=None, producer_id=first.producer_id, epoch=first.producer_epoch - 1)
    assert stale.error is ErrorCode.PRODUCER_FENCED


def test_exhausted_epoch_moves_to_a_new_producer_id():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    init(coordinator, clock)
    coordinator.describe(TXN).producer_epoch = 2**15 - 2
    assert coordinator.needs_producer_id(TXN)
    assert init(coordinator, clock, fresh=2000) == InitResult(ErrorCode.NONE, 2000, 0)


def test_idle_transactional_id_expires_with_a_tombstone():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    init(coordinator, clock)
    coordinator.tick(clock.now)
    clock.advance(CONFIG.id_expiration_ms + CONFIG.expiration_check_interval_ms)
    outcome = coordinator.tick(clock.now)
    assert (coordinator.partition_of(TXN), (txn_key(TXN), None)) in outcome.records
    assert coordinator.describe(TXN) is None


def test_replayed_state_resends_markers_of_a_recorded_commit_and_aborts_open_ones_later():
    coordinator, clock, producer = started()
    records = []
    initialized = coordinator.init_producer_id("w", "other", TIMEOUT_MS, -1, -1, 7, clock.now)
    complete(coordinator, initialized, clock.now)
    records += initialized.records
    added = coordinator.add_partitions("w", "other", 7, 0, [("out", 3)], clock.now)
    complete(coordinator, added, clock.now)
    records += added.records
    records += coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch, True, clock.now).records
    entries = [decode_txn_record(k, v) for _, (k, v) in records]
    restarted = TransactionCoordinator(CONFIG)
    restarted.load([e for e in entries if e is not None])
    assert restarted.describe(TXN).state is TxnState.PREPARE_COMMIT
    [resent] = restarted.tick(clock.now).markers
    assert resent.commit and resent.transactional_id == TXN
    written(restarted, resent, clock.now)
    assert restarted.describe(TXN).state is TxnState.COMPLETE_COMMIT
    [timed_out] = restarted.tick(clock.advance(TIMEOUT_MS + CONFIG.abort_check_interval_ms)).markers
    assert timed_out.transactional_id == "other" and not timed_out.commit


def test_list_filters_by_state_producer_and_duration():
    coordinator, clock, producer = started()
    init_other = coordinator.init_producer_id("w", "idle", TIMEOUT_MS, -1, -1, 5, clock.now)
    assert only_reply(init_other).error is ErrorCode.NONE
    clock.advance(5_000)
    names = lambda listed: [m.transactional_id for m in listed]  # noqa: E731
    assert names(coordinator.list_transactions([], [], -1, clock.now)) == [TXN, "idle"]
    assert names(coordinator.list_transactions(["Ongoing"], [], -1, clock.now)) == [TXN]
    assert names(coordinator.list_transactions([], [5], -1, clock.now)) == ["idle"]
    assert names(coordinator.list_transactions([], [], 5_000, clock.now)) == [TXN]
    assert names(coordinator.list_transactions([], [], 5_001, clock.now)) == []
    assert producer.producer_id == 1000


def test_consumer_offsets_replay_applies_committed_transactions_only():
    def offsets_batch(producer_id: int, offset: int) -> bytes:
        key, value = offset_record("g", "in", 0, CommittedOffset(offset, -1, "", 1, None))
        return build_batch([RecordInput(key, value)], producer_id=producer_id, producer_epoch=0,
                           is_transactional=True)

    log = (offsets_batch(1, 10) + offsets_batch(2, 20) + build_end_txn_marker(
        True, producer_id=1, producer_epoch=0, coordinator_epoch=0) + build_end_txn_marker(
        False, producer_id=2, producer_epoch=0, coordinator_epoch=0) + offsets_batch(3, 30))
    entries = list(replay([log]))
    assert [(type(e), getattr(e, "producer_id", None)) for e in entries] == [(OffsetEntry, None),
                                                                             (PendingTxnOffset, 3)]
    assert entries[0].committed is not None and entries[0].committed.offset == 10


def test_produce_verification_accepts_only_partitions_of_the_ongoing_transaction():
    coordinator, clock, producer = started([("out", 0)])
    pid, epoch = producer.producer_id, producer.producer_epoch

    def verify(partition: tuple[str, int], producer_epoch: int = epoch) -> Any:
        outcome = coordinator.add_partitions("w", TXN, pid, producer_epoch, [partition], clock.now, verify_only=True)
        assert outcome.records == []  # verifying adds nothing
        return only_reply(outcome)

    assert verify(("out", 0)) is ErrorCode.NONE
    assert verify(("out", 1)) is ErrorCode.TRANSACTION_ABORTABLE
    complete(coordinator, coordinator.end_txn("w", TXN, pid, epoch, True, clock.now), clock.now)
    assert verify(("out", 0)) is ErrorCode.TRANSACTION_ABORTABLE
    assert verify(("out", 0), epoch - 1) is ErrorCode.PRODUCER_FENCED


def v2_started(partitions: list[tuple[str, int]]) -> tuple[TransactionCoordinator, ManualClock, InitResult]:
    """A transactions V2 producer whose Produce v12 reached the leaders of ``partitions`` (the implicit add)."""
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    result = init(coordinator, clock)
    outcome = coordinator.add_partitions("w", TXN, result.producer_id, result.producer_epoch, partitions, clock.now,
                                         client_version=TV_2)
    assert only_reply(outcome) is ErrorCode.NONE
    coordinator.persisted(outcome, ok=True)  # the add's record is on the ISR
    return coordinator, clock, result


def test_v2_end_bumps_the_epoch_writes_markers_with_it_and_answers_it():
    coordinator, clock, producer = v2_started([("out", 0)])
    pid, epoch = producer.producer_id, producer.producer_epoch
    outcome = coordinator.end_txn("w", TXN, pid, epoch, True, clock.now, bump_epoch=True)
    assert only_reply(outcome) == InitResult(ErrorCode.NONE, pid, epoch + 1)
    [marker] = complete(coordinator, outcome, clock.now)
    assert (marker.producer_epoch, marker.commit, marker.partitions) == (epoch + 1, True, (("out", 0),))
    assert marker.transaction_version == TV_2  # WriteTxnMarkers v2 tells the leaders (KIP-1228)
    entry = decode_txn_record(*outcome.records[-1][1])
    assert entry is not None and entry.metadata is not None and entry.metadata.client_version == TV_2
    # the next transaction runs at the new epoch; the old one is fenced
    late = coordinator.add_partitions("w", TXN, pid, epoch, [("out", 0)], clock.now, client_version=TV_2)
    assert only_reply(late) is ErrorCode.PRODUCER_FENCED
    again = coordinator.add_partitions("w", TXN, pid, epoch + 1, [("out", 1)], clock.now, client_version=TV_2)
    assert only_reply(again) is ErrorCode.NONE


def test_v2_end_retried_with_the_old_epoch_gets_the_same_answer_and_a_stale_one_is_fenced():
    coordinator, clock, producer = v2_started([("out", 0)])
    pid, epoch = producer.producer_id, producer.producer_epoch
    complete(coordinator, coordinator.end_txn("w", TXN, pid, epoch, False, clock.now, bump_epoch=True), clock.now)
    retry = coordinator.end_txn("w", TXN, pid, epoch, False, clock.now, bump_epoch=True)
    assert only_reply(retry) == InitResult(ErrorCode.NONE, pid, epoch + 1) and retry.markers == []
    other = coordinator.end_txn("w", TXN, pid, epoch, True, clock.now, bump_epoch=True)
    assert only_reply(other) == InitResult(ErrorCode.INVALID_TXN_STATE)  # Kafka's table: CompleteAbort, retried commit
    older = coordinator.end_txn("w", TXN, pid, epoch - 1, False, clock.now, bump_epoch=True)
    assert only_reply(older) == InitResult(ErrorCode.PRODUCER_FENCED)


def test_v2_abort_of_nothing_bumps_the_epoch_and_commit_of_nothing_is_invalid():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    producer = init(coordinator, clock)
    pid, epoch = producer.producer_id, producer.producer_epoch
    commit = coordinator.end_txn("w", TXN, pid, epoch, True, clock.now, bump_epoch=True)
    assert only_reply(commit) == InitResult(ErrorCode.INVALID_TXN_STATE)
    abort = coordinator.end_txn("w", TXN, pid, epoch, False, clock.now, bump_epoch=True)
    assert only_reply(abort) == InitResult(ErrorCode.NONE, pid, epoch + 1)
    assert [m.partitions for m in complete(coordinator, abort, clock.now)] == [()]  # an empty transaction


def test_v1_and_v2_transactions_at_once_and_a_v1_end_of_a_v2_transaction_is_refused():
    coordinator, clock, producer = v2_started([("out", 0)])
    pid, epoch = producer.producer_id, producer.producer_epoch
    assert only_reply(coordinator.end_txn("w", TXN, pid, epoch, True, clock.now)) is ErrorCode.INVALID_TXN_STATE
    other = coordinator.init_producer_id("w", "classic", TIMEOUT_MS, -1, -1, 2000, clock.now)
    classic = only_reply(other)
    coordinator.persisted(other, ok=True)
    added = coordinator.add_partitions("w", "classic", classic.producer_id, classic.producer_epoch, [("out", 1)],
                                       clock.now)
    assert only_reply(added) is ErrorCode.NONE
    coordinator.persisted(added, ok=True)
    ended = coordinator.end_txn("w", "classic", classic.producer_id, classic.producer_epoch, True, clock.now)
    [marker] = complete(coordinator, ended, clock.now)
    assert (marker.producer_epoch, marker.transaction_version) == (classic.producer_epoch, TV_1)  # V1 keeps its epoch
    v2 = coordinator.end_txn("w", TXN, pid, epoch, True, clock.now, bump_epoch=True)
    assert only_reply(v2) == InitResult(ErrorCode.NONE, pid, epoch + 1)


def test_v2_timeout_abort_bumps_once_and_the_producers_abort_then_goes_on():
    coordinator, clock, producer = v2_started([("out", 0)])
    pid, epoch = producer.producer_id, producer.producer_epoch
    clock.advance(TIMEOUT_MS + 1)
    outcome = coordinator.tick(clock.now)
    [marker] = complete(coordinator, outcome, clock.now)
    assert (marker.producer_epoch, marker.commit) == (epoch + 1, False)
    answer = coordinator.end_txn("w", TXN, pid, epoch, False, clock.now, bump_epoch=True)
    assert only_reply(answer) == InitResult(ErrorCode.NONE, pid, epoch + 1)


def test_v2_end_with_the_last_epoch_moves_the_producer_to_a_new_id():
    coordinator, clock, producer = v2_started([("out", 0)])
    meta = coordinator.transactions[TXN]
    meta.producer_epoch = 32765
    assert not coordinator.end_needs_producer_id(TXN)  # Kafka's exhausted epochs: 32766 and up
    meta.producer_epoch = 32766
    assert coordinator.end_needs_producer_id(TXN)
    outcome = coordinator.end_txn("w", TXN, producer.producer_id, 32766, True, clock.now, bump_epoch=True,
                                  fresh_producer_id=5000)
    assert only_reply(outcome) == InitResult(ErrorCode.NONE, 5000, 0)
    [marker] = complete(coordinator, outcome, clock.now)
    assert (marker.producer_id, marker.producer_epoch) == (producer.producer_id, 32767)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (5000, 0, TxnState.COMPLETE_COMMIT)
    retry = coordinator.end_txn("w", TXN, producer.producer_id, 32766, True, clock.now, bump_epoch=True)
    assert only_reply(retry) == InitResult(ErrorCode.NONE, 5000, 0)


def test_transactional_offsets_are_pending_until_the_commit_marker():
    from pybroker.coordinator.coordinator import GroupConfig, GroupCoordinator
    from pybroker.protocol.messages import TxnOffsetCommitRequest

    groups = GroupCoordinator(GroupConfig())
    request = TxnOffsetCommitRequest(transactional_id=TXN, group_id="g", producer_id=5, producer_epoch=0, topics=[
        TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name="in", partitions=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=42)])])
    assert groups.validate_txn_offsets(request) is ErrorCode.NONE
    entries, records, errors = groups.txn_offset_records(request, 1)
    assert len(records) == 1 and not errors
    groups.stage_txn_offsets(5, entries)
    assert groups.pending_partitions("g") == {("in", 0)}
    assert groups.fetch_offsets("g", [("in", [0])]) == [("in", [(0, None)])]
    groups.complete_txn_offsets(5, groups.partition_of("g") + 1, commit=True, now_ms=2)  # another partition
    assert groups.pending_partitions("g") == {("in", 0)}
    groups.complete_txn_offsets(5, groups.partition_of("g"), commit=True, now_ms=2)
    assert not groups.pending_partitions("g")
    [(_, [(_, committed)])] = groups.fetch_offsets("g", [("in", [0])])
    assert committed is not None and committed.offset == 42


def test_unload_forgets_the_partitions_transactional_ids_and_their_coordinator_epoch():
    coordinator, _, _ = started()
    partition = coordinator.partition_of(TXN)
    coordinator.coordinator_epochs[partition] = 3
    assert coordinator.unload(partition + 1) == [] and TXN in coordinator.transactions
    coordinator.unload(partition)
    assert TXN not in coordinator.transactions and partition not in coordinator.coordinator_epochs
