"""The share-group checker on synthetic histories: a clean one passes, and each anomaly is flagged by one history
made to show it; a broker fault explains what in-memory share state loses, unless the state is durable."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest

from chaos.share_checker import SHARE_ANOMALIES, check_share
from chaos.share_state_log import archived, passed
from chaos.share_workload import SHARE_GROUP, SHARE_TOPIC, state_reads
from pybroker.coordinator.share_state.records import ShareKey, ShareState, StateBatch, snapshot_record, update_record
from pybroker.records.record import RecordInput, build_batch

LIMIT = 3


def produced(offset: int, t: float = 0.0) -> dict[str, Any]:
    return {"type": "share-produced", "t": t, "partition": 0, "offset": offset, "value": f"s{offset}"}


def deliver(member: str, offset: int, dc: int, wall: float) -> dict[str, Any]:
    return {"type": "share-deliver", "t": wall, "member": member, "partition": 0, "offset": offset, "dc": dc,
            "value": f"s{offset}", "wall": wall}


def ack(member: str, offset: int, dc: int, kind: str, wall: float, error: str | None = None) -> dict[str, Any]:
    return {"type": "share-ack", "t": wall, "member": member, "partition": 0, "offset": offset, "dc": dc,
            "ack": kind, "wall": wall, "error": error}


def fault(t: float) -> dict[str, Any]:
    return {"type": "fault", "phase": "start", "t": t, "kind": "kill"}


END = {"type": "share-end", "t": 100.0, "complete": True}

CLEAN = [
    produced(0), produced(1), produced(2), produced(3),
    deliver("a", 0, 1, 1.0), ack("a", 0, 1, "release", 1.1),
    deliver("b", 0, 2, 2.0), ack("b", 0, 2, "accept", 2.1),
    deliver("a", 1, 1, 1.0), ack("a", 1, 1, "reject", 1.2),
    deliver("b", 2, 1, 1.0),  # b sat on it: the lock expired and a got it
    deliver("a", 2, 2, 6.0), ack("b", 2, 1, "accept", 6.5, error="INVALID_RECORD_STATE"),
    ack("a", 2, 2, "accept", 6.6),
    deliver("a", 3, 1, 1.0), deliver("b", 3, 2, 5.0), deliver("a", 3, 3, 9.0),  # archived at the limit
    END,
]


def test_a_clean_history_passes() -> None:
    report = check_share(CLEAN, LIMIT, durable=True)
    assert report.clean, report.summary()
    assert report.stats["share_accepted"] == 2 and report.stats["share_rejected"] == 1
    assert report.stats["share_archived"] == 1


@pytest.mark.parametrize("name, events", [
    ("share_over_limit", [produced(0), deliver("a", 0, 4, 1.0), ack("a", 0, 4, "accept", 1.1)]),
    ("share_two_holders", [produced(0), deliver("a", 0, 1, 1.0), deliver("b", 0, 2, 1.5),
                           ack("a", 0, 1, "accept", 2.0)]),  # the broker took a's ack after handing it to b
    ("share_two_holders", [produced(0), deliver("a", 0, 1, 1.0), deliver("b", 0, 1, 1.2),
                           ack("b", 0, 1, "accept", 2.0)]),  # one acquisition delivered twice
    ("share_after_ack", [produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "accept", 1.1),
                         deliver("b", 0, 2, 3.0)]),
    ("share_after_ack", [produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "reject", 1.1),
                         deliver("b", 0, 1, 3.0)]),  # from the start again (state lost): also two holders of count 1
    ("share_count_back", [produced(0), deliver("a", 0, 1, 1.0), deliver("b", 0, 2, 5.0),
                          {"type": "share-leader", "t": 6.0, "partition": 0, "leader": 2},
                          deliver("c", 0, 1, 7.0)]),  # seed 17: the new leader read a count from before b's
    ("share_unacknowledged", [produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "release", 1.1)]),
    ("share_unacknowledged", [produced(0)]),  # never delivered
])
def test_each_anomaly_is_flagged(name: str, events: list[dict[str, Any]]) -> None:
    report = check_share([*events, END], LIMIT, durable=True)
    assert report.counts().get(name) == 1, report.summary()


def test_an_acknowledgement_answered_with_an_error_or_unanswered_is_in_doubt_not_accepted() -> None:
    timed_out = "KafkaError{code=_TIMED_OUT,val=-185,str=\"Local: Timed out\"}"
    report = check_share([produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "accept", 1.1, error=timed_out),
                          END], LIMIT, durable=True)
    assert report.clean and report.stats["share_in_doubt"] == 1 and "share_ack_in_doubt" in report.explained
    refused = "KafkaError{code=INVALID_RECORD_STATE,val=121,str=\"Broker: The record state is invalid\"}"
    sending = {**ack("a", 0, 1, "accept", 1.1), "type": "share-acking"}
    report = check_share([produced(0), deliver("a", 0, 1, 1.0), sending, ack("a", 0, 1, "accept", 1.1, error=refused),
                          END], LIMIT, durable=True)
    assert report.counts() == {"share_unacknowledged": 1}  # not applied: it must be delivered again
    broker_timeout = "KafkaError{code=REQUEST_TIMED_OUT,val=7,str=\"Broker: Request timed out\"}"
    report = check_share([produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "accept", 1.1, error=broker_timeout),
                          END], LIMIT, durable=True)  # the share coordinator's write may still commit (seed 1)
    assert report.clean and report.stats["share_in_doubt"] == 1
    broken = "KafkaError{code=NETWORK_EXCEPTION,val=13,str=\"Broker: Broker disconnected before response received\"}"
    report = check_share([produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "accept", 1.1, error=broken),
                          END], LIMIT, durable=True)  # the connection to the coordinator broke after the write
    assert report.clean and report.stats["share_in_doubt"] == 1
    fenced = "KafkaError{code=FENCED_LEADER_EPOCH,val=74,str=\"Broker: Leader epoch is older than broker epoch\"}"
    report = check_share([produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "accept", 1.1, error=fenced),
                          END], LIMIT, durable=True)  # a retry's answer: its first attempt may have committed (7500)
    assert report.clean and report.stats["share_in_doubt"] == 1
    killed = [produced(0), deliver("a", 0, 1, 1.0), {**ack("a", 0, 1, "reject", 1.1), "type": "share-acking"}, END]
    report = check_share(killed, LIMIT, durable=True)
    assert report.clean and report.stats["share_in_doubt"] == 1
    released = [produced(0), deliver("a", 0, 1, 1.0), {**ack("a", 0, 1, "release", 1.1), "type": "share-acking"}, END]
    assert check_share(released, LIMIT, durable=True).counts() == {"share_unacknowledged": 1}  # it must come back


def test_a_fault_explains_lost_state_only_while_it_is_in_memory() -> None:
    events = [produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "accept", 1.1), fault(2.0),
              deliver("b", 0, 1, 3.0), END]
    in_memory = check_share(events, LIMIT, durable=False)
    assert in_memory.clean
    assert sorted(e["would_be"] for e in in_memory.explained["share_state_lost"]) == ["share_after_ack",
                                                                                      "share_two_holders"]
    assert check_share(events, LIMIT, durable=True).counts() == {"share_after_ack": 1, "share_two_holders": 1}
    skipped = [produced(0, t=1.0), produced(1, t=1.0), fault(2.0), deliver("a", 1, 1, 3.0),
               ack("a", 1, 1, "accept", 3.1), END]  # reading started again past offset 0 after the fault
    assert check_share(skipped, LIMIT, durable=False).clean
    assert check_share(skipped, LIMIT, durable=True).counts() == {"share_unacknowledged": 1}
    before = [fault(0.5), *events[:3], *events[4:]]  # a fault before the ack explains nothing
    assert check_share(before, LIMIT, durable=False).counts() == {"share_after_ack": 1, "share_two_holders": 1}


def test_a_new_leader_of_the_partition_explains_lost_state_while_it_is_in_memory() -> None:
    moved = {"type": "share-leader", "t": 5.0, "partition": 0, "leader": 2}
    skipped = [produced(0, t=4.0), moved, END]  # the new leader started from the log end: never delivered
    assert check_share(skipped, LIMIT, durable=False).clean
    assert check_share(skipped, LIMIT, durable=True).counts() == {"share_unacknowledged": 1}
    elsewhere = [produced(0, t=4.0), {**moved, "partition": 1}, deliver("a", 1, 1, 6.0), END]
    assert check_share(elsewhere, LIMIT, durable=False).counts() == {"share_unacknowledged": 1}
    # acknowledged by the producer after the move, but below where the new leader's share-partition started
    late = [moved, produced(0, t=6.0), produced(1, t=6.0), deliver("a", 1, 1, 7.0), ack("a", 1, 1, "accept", 7.1),
            END]
    assert check_share(late, LIMIT, durable=False).clean
    assert check_share(late, LIMIT, durable=True).counts() == {"share_unacknowledged": 1}
    gap = [moved, produced(0, t=6.0), produced(1, t=6.0), deliver("a", 0, 1, 7.0), ack("a", 0, 1, "accept", 7.1),
           END]  # offset 1 lies past where reading started again: lost, whatever the state
    assert check_share(gap, LIMIT, durable=False).counts() == {"share_unacknowledged": 1}


def test_every_anomaly_has_a_history_that_flags_it() -> None:
    flagged = {name for name, _ in test_each_anomaly_is_flagged.pytestmark[0].args[1]}  # type: ignore[attr-defined]
    assert flagged == set(SHARE_ANOMALIES)


def test_an_unacknowledged_acquisition_a_new_leader_offers_again_is_explained_only_then() -> None:
    """Seen in chaos seeds 1 and 2: a record acquired on the old leader (its accept failed with it) comes back from
    the new leader with the same delivery count, as in Kafka, where acquisitions are not written to the share
    coordinator."""
    moved = {"type": "share-leader", "t": 2.0, "partition": 0, "leader": 2}
    failed = ack("a", 0, 1, "accept", 1.5, error="KafkaError{code=NOT_LEADER_OR_FOLLOWER,val=6}")
    again = [produced(0), deliver("a", 0, 1, 1.0), failed, moved, deliver("b", 0, 1, 3.0),
             ack("b", 0, 1, "accept", 3.1), END]
    report = check_share(again, LIMIT, durable=True)
    assert report.clean and len(report.explained["share_acquisition_not_durable"]) == 1
    to_a = [*again[:4], deliver("a", 0, 1, 3.0), ack("a", 0, 1, "accept", 3.1), END]  # the same member again
    assert check_share(to_a, LIMIT, durable=True).clean
    lost = ack("a", 0, 1, "accept", 1.5, error="_TRANSPORT")  # no sign of a move: a record held twice
    unmoved = [lost if e is failed else e for e in again if e is not moved]
    assert check_share(unmoved, LIMIT, durable=True).counts() == {"share_two_holders": 1}
    released = [*again[:2], ack("a", 0, 1, "release", 1.5), *again[3:]]  # a confirmed release was written
    assert check_share(released, LIMIT, durable=True).counts() == {"share_two_holders": 1}
    # seed 9: the workload saw the move only after the new leader's delivery; the old leader had said so before
    told = [*again[:3], deliver("b", 0, 1, 3.0), ack("b", 0, 1, "accept", 3.1), {**moved, "t": 3.2}, END]
    assert check_share(told, LIMIT, durable=True).clean
    assert check_share([*again[:2], lost, *told[3:]], LIMIT,
                       durable=True).counts() == {"share_two_holders": 1}


def test_a_new_leaders_read_of_the_state_is_a_move_whenever_metadata_showed_it(tmp_path) -> None:
    """Chaos seed 6018: the new leader read the share state and handed the records out again 11 ms later, before
    the old leader refused the first holder's acknowledgement and long before the workload's Metadata poll saw the
    move. The read, in the broker's log, explains the repeated delivery count; a read before the first delivery
    does not."""
    start = {"type": "share-start", "t": 1.0, "wall": 1_000_001.0, "durable": True}
    history = [start, produced(0), deliver("a", 0, 1, 1.5), deliver("b", 0, 1, 3.0), ack("b", 0, 1, "accept", 3.1),
               ack("a", 0, 1, "accept", 3.2, error="KafkaError{code=NOT_LEADER_OR_FOLLOWER,val=6}"), END]
    assert check_share(history, LIMIT, durable=True).counts() == {"share_two_holders": 1}

    def logged(at: float) -> str:  # the history's time `at` as the broker's log line of a read then
        when = datetime.fromtimestamp(start["wall"] - start["t"] + at).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        return (f"[{when}] INFO Share-partition {SHARE_GROUP} of {SHARE_TOPIC}-0 read at start offset 0 "
                f"(state epoch 1, leader epoch 4) (pybroker.share)\n")

    (tmp_path / "broker-2").mkdir()
    (tmp_path / "broker-2" / "broker.log").write_text("[2026-11-29 09:54:02,000] INFO unrelated (pybroker)\n"
                                                      + logged(2.9))
    [read] = state_reads(tmp_path, history)
    assert (read["partition"], read["broker"], read["leader_epoch"], read["at"]) == (0, 2, 4, 2.9)
    report = check_share([*history, read], LIMIT, durable=True)
    assert report.clean and len(report.explained["share_acquisition_not_durable"]) == 1
    (tmp_path / "broker-2" / "broker.log").write_text(logged(1.2))  # the read came before both deliveries
    assert check_share([*history, *state_reads(tmp_path, history)], LIMIT,
                       durable=True).counts() == {"share_two_holders": 1}


def test_a_record_the_coordinator_archived_after_deliveries_a_killed_member_held_is_explained_only_then() -> None:
    """Chaos seed 7401: a record delivered twice and released, its member killed 150 ms later; the coordinator
    stored it archived with count 3 (the member's consumer had acquired it again in the background), so no member
    was offered it again and the drain gave up on it."""
    seen = [produced(0), deliver("a", 0, 1, 1.0), ack("a", 0, 1, "release", 1.1), deliver("a", 0, 2, 2.0),
            ack("a", 0, 2, "release", 2.1)]
    killed = {"type": "share-member-killed", "t": 2.2, "member": "a"}
    stored = {"type": "share-archived", "partition": 0, "first": 0, "last": 5, "dc": LIMIT}
    drain = {**END, "complete": False}
    report = check_share([*seen, killed, stored, drain], LIMIT, durable=True)
    assert report.clean and len(report.explained["share_archived_unseen"]) == 1
    assert report.stats["share_archived"] == 1
    unflagged = {"share_unacknowledged": 1}
    assert check_share([*seen, stored, drain], LIMIT, durable=True).counts() == unflagged  # nobody could hold it
    assert check_share([{**killed, "t": 1.5}, *seen, stored, drain], LIMIT,
                       durable=True).counts() == unflagged  # killed before the last delivery seen
    assert check_share([*seen, killed, {**stored, "dc": 2}, drain], LIMIT,
                       durable=True).counts() == unflagged  # archived before the limit: not by deliveries
    assert check_share([*seen, killed, {**stored, "first": 1}, drain], LIMIT,
                       durable=True).counts() == unflagged  # another offset
    assert check_share([produced(0), killed, stored, drain], LIMIT,
                       durable=True).counts() == unflagged  # three unseen deliveries need three kills
    assert check_share([*seen, killed, stored, drain], LIMIT, durable=False).counts() == unflagged


def test_the_archived_offsets_are_read_from_the_longest_copy_of_share_group_state(tmp_path) -> None:
    topic_id = uuid.uuid4()

    def state(*batches: StateBatch) -> ShareState:
        return ShareState(snapshot_epoch=0, state_epoch=1, leader_epoch=3, start_offset=0, batches=list(batches))

    ours, theirs = ShareKey(SHARE_GROUP, topic_id, 1), ShareKey("other-group", topic_id, 1)
    written = [snapshot_record(ours, state(StateBatch(0, 4, 2, 1))),
               update_record(ours, 0, 3, -1, [StateBatch(5, 6, 4, LIMIT), StateBatch(7, 7, 0, 2)]),
               snapshot_record(theirs, state(StateBatch(0, 9, 4, LIMIT)))]
    diverged = [written[0], snapshot_record(ours, state(StateBatch(8, 8, 4, LIMIT)))]  # cut before it healed
    for broker, records in ((0, written), (1, diverged)):
        directory = tmp_path / f"broker-{broker}" / "logs" / "__share_group_state-7"
        directory.mkdir(parents=True)
        (directory / "00000000000000000000.log").write_bytes(build_batch(records))
    assert archived(tmp_path, SHARE_GROUP) == [
        {"type": "share-archived", "partition": 1, "first": 5, "last": 6, "dc": LIMIT}]


def test_a_record_the_start_offset_passed_a_lock_after_its_last_count_was_stored_is_explained_only_then() -> None:
    """Chaos seed 8001: offset 1081 released by m14 (count 1) and m20 (count 2); m18, killed 20 ms later, had
    acquired it a third time in the background, unseen. Its lock ran out 3 s later and archived it, and as it was
    the first in flight the coordinator's write moved the start offset past it (3054 ms after count 2 was stored)
    instead of storing it archived; the drain waited for it until it gave up."""
    start = {"type": "share-start", "t": 0.4, "wall": 1_000_000.4, "durable": True, "delivery_count_limit": LIMIT,
             "lock_ms": 3000}
    seen = [start, produced(0, 92.563), deliver("m14", 0, 1, 92.563), ack("m14", 0, 1, "release", 92.617),
            deliver("m20", 0, 2, 92.664), ack("m20", 0, 2, "release", 92.67)]
    killed = {"type": "share-member-killed", "t": 92.684, "member": "m18"}
    stored = {"type": "share-passed", "partition": 0, "first": 0, "last": 0, "dc": LIMIT - 1, "held_ms": 3054}
    drain = {**END, "complete": False}
    report = check_share([*seen, killed, stored, drain], LIMIT, durable=True)
    assert report.clean and len(report.explained["share_archived_unseen"]) == 1, report.summary()
    assert report.stats["share_archived"] == 1
    unflagged = {"share_unacknowledged": 1}
    for changed, why in (([*seen, stored, drain], "nobody could hold it"),
                         ([*seen, killed, {**stored, "held_ms": 2999}, drain], "passed before a lock could run out"),
                         ([*seen, killed, {**stored, "dc": LIMIT - 2}, drain], "passed below the limit"),
                         ([*seen, killed, {**stored, "first": 1, "last": 1}, drain], "another offset"),
                         ([*seen[1:], killed, stored, drain], "no lock duration known")):
        assert check_share(changed, LIMIT, durable=True).counts() == unflagged, why
    assert check_share([*seen, killed, stored, drain], LIMIT, durable=False).counts() == unflagged


def _state_log(tmp_path, broker: int, writes: list[tuple[int, tuple[bytes, bytes | None]]]) -> None:
    """``writes`` (timestamp ms, record) as one batch each in a ``__share_group_state`` partition of ``broker``."""
    directory = tmp_path / f"broker-{broker}" / "logs" / "__share_group_state-7"
    directory.mkdir(parents=True)
    (directory / "00000000000000000000.log").write_bytes(b"".join(
        build_batch([RecordInput(key, value, timestamp=at)], base_offset=i) for i, (at, (key, value))
        in enumerate(writes)))


def test_the_offsets_the_start_offset_passed_while_stored_available_are_read_with_how_long(tmp_path) -> None:
    topic_id = uuid.uuid4()
    ours, theirs = ShareKey(SHARE_GROUP, topic_id, 0), ShareKey("other-group", topic_id, 0)

    def write(start: int, *batches: StateBatch, key: ShareKey = ours) -> tuple[bytes, bytes | None]:
        return update_record(key, 0, 5, start, list(batches))

    initial = snapshot_record(ours, ShareState(snapshot_epoch=0, state_epoch=1, leader_epoch=5, start_offset=10))
    _state_log(tmp_path, 0, [
        (1_000, initial),
        (1_100, write(10, StateBatch(10, 13, 0, 0))),  # acquired once: stored available, count 0
        (1_200, write(10, StateBatch(10, 10, 0, 1), StateBatch(11, 13, 0, 0))),  # 10 released
        (2_000, write(10, StateBatch(10, 10, 0, 2), StateBatch(11, 11, 2, 1), StateBatch(12, 13, 0, 1))),
        (3_000, write(-1, StateBatch(10, 10, 0, 2), StateBatch(11, 11, 2, 1))),  # the same counts: since 2000
        (4_000, write(10, StateBatch(10, 10, 0, 9), key=theirs)),
        (5_054, write(14)),  # 10 archived at its lock's end, 11 acknowledged, 12 and 13 done: passed
    ])
    assert passed(tmp_path, SHARE_GROUP) == [
        {"type": "share-passed", "partition": 0, "first": 10, "last": 10, "dc": 2, "held_ms": 3054},
        {"type": "share-passed", "partition": 0, "first": 12, "last": 13, "dc": 1, "held_ms": 3054}]


def test_a_delivery_by_a_replaced_leader_is_explained_only_with_its_fenced_acknowledgement() -> None:
    """Chaos seed 7610: the new leader read the state and handed a released record to m5; 21 ms later the old
    leader, paused through the election, handed it to m4 with the same count, and m4's release was answered
    FENCED_LEADER_EPOCH."""
    fenced = "KafkaError{code=FENCED_LEADER_EPOCH,val=74,str=\"Broker: Leader epoch is older than broker epoch\"}"
    history = [produced(0), deliver("m1", 0, 1, 1.0), ack("m1", 0, 1, "release", 1.1), deliver("m5", 0, 2, 2.0),
               deliver("m4", 0, 2, 2.02), ack("m4", 0, 2, "release", 2.03, error=fenced),
               deliver("m3", 0, 3, 6.0), ack("m3", 0, 3, "accept", 6.1), END]
    report = check_share(history, LIMIT, durable=True)
    assert report.clean and len(report.explained["share_replaced_leader_delivery"]) == 1
    refused = "KafkaError{code=INVALID_RECORD_STATE,val=121,str=\"Broker: The record state is invalid\"}"
    unfenced = [ack("m4", 0, 2, "release", 2.03, error=refused) if e.get("error") == fenced else e for e in history]
    assert check_share(unfenced, LIMIT, durable=True).counts() == {"share_two_holders": 1}



def test_a_release_handed_out_again_before_its_write_and_lost_with_the_leader_is_flagged() -> None:
    """share-stall-then-kill on the released-before-written mutant (seed 11): a's release waits for a write that
    never lands (answered REQUEST_TIMED_OUT, in doubt), b is handed the record with the next count meanwhile, the
    leader is killed, and the next one reads the count from before the release. The repeat of a's count is what
    Kafka does too (explained); the count going back is not. With the write awaited before the record is handed
    out again (the broker as it is), the same fault leaves only the explained repeat."""
    timed_out = ack("a", 0, 2, "release", 1.5, error='KafkaError{code=REQUEST_TIMED_OUT,val=7}')
    stalled = {"type": "fault", "phase": "start", "t": 1.0, "kind": "share-stall-then-kill"}
    read = {"type": "share-state-read", "t": 30.0, "at": 9.0, "partition": 0, "broker": 0, "leader_epoch": 1}
    mutant = [produced(0), deliver("a", 0, 1, 0.5), ack("a", 0, 1, "release", 0.6), stalled, deliver("a", 0, 2, 1.2),
              timed_out, deliver("b", 0, 3, 5.0), read, deliver("c", 0, 2, 10.0), ack("c", 0, 2, "accept", 10.1),
              END]
    report = check_share(mutant, LIMIT, durable=True)
    # c's accept, taken after b was handed a higher count, is flagged too
    assert report.counts() == {"share_count_back": 1, "share_two_holders": 1}, report.summary()
    assert len(report.explained["share_acquisition_not_durable"]) == 1
    fixed = [e for e in mutant if not (e["type"] == "share-deliver" and e["member"] == "b")]
    assert check_share(fixed, LIMIT, durable=True).clean
