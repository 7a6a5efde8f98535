"""The chaos checker must be able to fail: one synthetic history per anomaly, and a clean one."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from chaos.checker import check
from chaos.disk import lose_unsynced_writes
from chaos.provenance import LogProvenance, ProducerStamp
from pybroker.records import RecordInput, build_batch


def ack(value: str, partition: int, offset: int, t: float = 1.0) -> dict[str, Any]:
    return {"t": t, "type": "ack", "process": "p0", "topic": "queue", "value": value, "partition": partition,
            "offset": offset}


def read(value: str, partition: int, offset: int, process: str = "drain", type_: str = "read",
         topic: str = "queue") -> dict[str, Any]:
    return {"t": 2.0, "type": type_, "process": process, "topic": topic, "value": value, "partition": partition,
            "offset": offset}


def poll(value: str, partition: int, offset: int, process: str = "c0") -> dict[str, Any]:
    return read(value, partition, offset, process, "poll")


def commit(partition: int, offset: int, process: str = "c0") -> dict[str, Any]:
    return {"t": 3.0, "type": "commit", "process": process, "topic": "queue", "offsets": {str(partition): offset}}


def txn(n: int, values: list[str], outcome: str) -> dict[str, Any]:
    return {"t": 1.0, "type": "txn", "process": "t0", "txn": n, "values": values, "outcome": outcome}


DRAINED = {"t": 9.0, "type": "drain", "complete": True, "behind": {}}


def test_clean_history_has_no_anomaly() -> None:
    history = [ack("a", 0, 0), ack("b", 0, 1), poll("a", 0, 0), poll("b", 0, 1), commit(0, 2),
               read("a", 0, 0), read("b", 0, 1), DRAINED]
    report = check(history)
    assert report.clean, report.summary()
    assert report.stats["acked"] == 2 and report.stats["drained"] == 2


def test_acked_value_missing_from_the_drain_is_lost() -> None:
    report = check([ack("a", 0, 0), ack("b", 0, 1), read("a", 0, 0), DRAINED])
    assert report.counts() == {"lost": 1}
    assert report.anomalies["lost"][0]["value"] == "b"


def test_same_value_at_two_offsets_is_a_duplicate() -> None:
    report = check([ack("a", 0, 0), read("a", 0, 0), read("a", 0, 1), DRAINED])
    assert report.counts() == {"duplicate": 1}


def test_two_values_at_one_offset_is_divergence() -> None:
    report = check([ack("a", 0, 5), ack("b", 0, 6), poll("a", 0, 5), read("b", 0, 5), read("x", 0, 6), DRAINED])
    assert report.counts()["divergent"] == 2  # offset 5: a/b, offset 6: b/x
    assert report.counts()["lost"] == 1


def test_poll_going_backwards_within_an_assignment() -> None:
    assign = {"t": 0.5, "type": "assign", "process": "c0", "partitions": [["queue", 0]]}
    history = [ack("a", 0, 0), ack("b", 0, 1), assign, poll("a", 0, 0), poll("b", 0, 1), poll("a", 0, 0),
               read("a", 0, 0), read("b", 0, 1), DRAINED]
    assert check(history).counts() == {"poll_backwards": 1}
    # a new assignment may start again from the committed offset
    rewound = history[:5] + [assign, poll("a", 0, 0)] + history[6:]
    assert check(rewound).clean


def test_committed_offset_going_backwards() -> None:
    history = [commit(0, 10), commit(0, 12, "c1"), commit(0, 11), DRAINED]
    assert check(history).counts() == {"commit_backwards": 1}


def test_aborted_read_and_partial_transaction() -> None:
    history = [txn(1, ["t-1-0", "t-1-1"], "abort"), txn(2, ["t-2-0", "t-2-1"], "commit"),
               txn(3, ["t-3-0"], "unknown"),
               read("t-1-0", 0, 0, topic="txn"), read("t-2-0", 0, 2, topic="txn"), DRAINED]
    assert check(history).counts() == {"aborted_read": 1, "partial_txn": 1}


def test_an_ack_without_an_offset_is_judged_for_loss_only() -> None:
    """librdkafka acks a retried idempotent message without its offset; it must still be drained."""
    history = [{**ack("a", 0, 0), "offset": None}, ack("b", 0, 1), read("b", 0, 1), DRAINED]
    assert check(history).counts() == {"lost": 1}
    assert check([{**ack("a", 0, 0), "offset": None}, read("a", 0, 0), DRAINED]).clean


def test_an_input_in_two_committed_transform_outputs_breaks_exactly_once() -> None:
    """Consume-transform-produce: p0-1 transformed in attempt 1 (committed) and again in attempt 3
    (committed: its offsets were not committed with attempt 1) is a duplicate; p0-2 transformed
    again after the abort of attempt 2 is not."""
    history = [txn(1, ["x1:p0-1"], "commit"), txn(2, ["x2:p0-2"], "abort"), txn(3, ["x3:p0-1", "x3:p0-2"], "commit"),
               read("x1:p0-1", 0, 0, topic="ctp"), read("x3:p0-1", 0, 3, topic="ctp"),
               read("x3:p0-2", 0, 4, topic="ctp"), DRAINED]
    report = check(history)
    assert report.counts() == {"duplicate": 1}
    assert report.anomalies["duplicate"] == [{"input": "p0-1", "outputs": ["x1:p0-1", "x3:p0-1"]}]


def timed_out(value: str, t: float) -> dict[str, Any]:
    return {"t": t, "type": "fail", "process": value.rsplit("-", 1)[0], "topic": "queue", "value": value,
            "error": 'KafkaError{code=_MSG_TIMED_OUT,val=-192,str="Local: Message timed out"}'}


def stamps(table: dict[tuple[str, int, int], tuple[int, int, int]]):
    return lambda topic, partition, offset: (ProducerStamp(*table[(topic, partition, offset)])
                                             if (topic, partition, offset) in table else None)


def test_a_copy_under_a_bumped_epoch_after_a_local_timeout_is_explained_not_an_anomaly() -> None:
    """librdkafka #4953: a local message timeout bumps the idempotent producer's epoch and re-sends a
    possibly persisted message at sequence 0; the broker cannot tell it from a new message."""
    history = [timed_out("p0-7", 1.0), {**ack("p0-9", 0, 11), "t": 2.0}, read("p0-9", 0, 10), read("p0-9", 0, 11),
               DRAINED]
    report = check(history, stamps({("queue", 0, 10): (1000, 0, 418), ("queue", 0, 11): (1000, 2, 0)}))
    assert report.clean, report.summary()
    assert report.explained["duplicate_epoch_bump"][0]["stamps"] == [[1000, 0, 418], [1000, 2, 0]]


def test_a_copy_under_an_epoch_its_librdkafka_log_says_it_bumped_is_explained() -> None:
    """Chaos round 5008: on one partition the head request was refused (NOT_ENOUGH_REPLICAS, not written)
    and the next answered OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka answers too; librdkafka then bumps the
    producer's epoch and re-sends the possibly persisted messages of its other partitions from sequence 0."""
    bump = {"t": 1.5, "type": "epoch-bump", "process": "p0",
            "detail": "DRAIN [rdkafka#producer-1] Beginning partition drain in state Assigned for PID{Id:1000,Epoch:0} "
                      "epoch bump for 3 partition(s) with in-flight requests: skipped sequence numbers"}
    history = [bump, {**ack("p0-9", 2, 11), "t": 2.0}, read("p0-9", 2, 10), read("p0-9", 2, 11), DRAINED]
    bumped = stamps({("queue", 2, 10): (1000, 0, 599), ("queue", 2, 11): (1000, 1, 0)})
    report = check(history, bumped)
    assert report.clean, report.summary()
    assert report.explained["duplicate_epoch_bump"][0]["bumped_by"] == [f"at 1.5 s: {bump['detail']}"]
    other_process = [{**bump, "process": "p1"}] + history[1:]
    assert check(other_process, bumped).counts() == {"duplicate": 1}  # another producer's bump explains nothing
    after_the_ack = [{**bump, "t": 3.0}] + history[1:]
    assert check(after_the_ack, bumped).counts() == {"duplicate": 1}


def test_a_duplicate_the_logs_do_not_explain_stays_an_anomaly() -> None:
    history = [timed_out("p0-7", 1.0), {**ack("p0-9", 0, 11), "t": 2.0}, read("p0-9", 0, 10), read("p0-9", 0, 11),
               DRAINED]
    same_epoch = stamps({("queue", 0, 10): (1000, 0, 418), ("queue", 0, 11): (1000, 0, 419)})
    assert check(history, same_epoch).counts() == {"duplicate": 1}  # idempotence should have refused it
    other_producer = stamps({("queue", 0, 10): (1000, 0, 418), ("queue", 0, 11): (1001, 1, 0)})
    assert check(history, other_producer).counts() == {"duplicate": 1}
    bumped = stamps({("queue", 0, 10): (1000, 0, 418), ("queue", 0, 11): (1000, 1, 0)})
    no_timeout = [e for e in history if e["type"] != "fail"]
    assert check(no_timeout, bumped).counts() == {"duplicate": 1}  # nothing made the client bump its epoch
    late_timeout = [timed_out("p0-7", 3.0)] + no_timeout
    assert check(late_timeout, bumped).counts() == {"duplicate": 1}  # the timeout came after the ack
    assert check(history).counts() == {"duplicate": 1}  # without the logs nothing is explained


def test_each_copy_of_a_duplicated_input_may_be_transformed_once() -> None:
    history = [timed_out("p0-7", 1.0), {**ack("p0-9", 0, 11), "t": 2.0}, read("p0-9", 0, 10), read("p0-9", 0, 11),
               txn(1, ["x1:p0-9", "x1:p0-9"], "commit"), read("x1:p0-9", 0, 0, topic="ctp"),
               read("x1:p0-9", 0, 1, topic="ctp"), DRAINED]
    bumped = stamps({("queue", 0, 10): (1000, 0, 418), ("queue", 0, 11): (1000, 1, 0)})
    report = check(history, bumped)
    assert report.clean, report.summary()
    assert set(report.explained) == {"duplicate_epoch_bump", "output_per_input_copy"}
    three_outputs = history[:-1] + [read("x1:p0-9", 0, 2, topic="ctp"), DRAINED]
    assert check(three_outputs, bumped).counts() == {"duplicate": 1}


def test_log_provenance_reads_producer_stamps_from_segment_files(tmp_path: Path) -> None:
    partition = tmp_path / "broker-0" / "logs" / "queue-2"
    partition.mkdir(parents=True)
    segment = build_batch([RecordInput(None, b"a")], base_offset=0, producer_id=1000, producer_epoch=0,
                          base_sequence=417)
    segment += build_batch([RecordInput(None, b"b"), RecordInput(None, b"c")], base_offset=1, producer_id=1000,
                           producer_epoch=2, base_sequence=0)
    (partition / "00000000000000000000.log").write_bytes(segment)
    provenance = LogProvenance.of_round(tmp_path)
    assert provenance.stamp("queue", 2, 0) == ProducerStamp(1000, 0, 417)
    assert provenance.stamp("queue", 2, 2) == ProducerStamp(1000, 2, 1)
    assert provenance.stamp("queue", 2, 3) is None
    assert provenance.stamp("queue", 1, 0) is None


def test_incomplete_drain_is_reported() -> None:
    history = [ack("a", 0, 0), read("a", 0, 0), {"t": 9.0, "type": "drain", "complete": False,
                                                 "behind": {"queue-0": [1, 2]}}]
    assert check(history).counts() == {"drain_incomplete": 1}


def _batch(base: int, count: int) -> bytes:
    """A v2 batch's header fields the power-loss cut reads (base offset, length, last offset delta)."""
    body = struct.pack(">iBihi", 0, 2, 0, 0, count - 1) + b"\0" * 40
    return struct.pack(">qi", base, len(body)) + body


def test_power_loss_cuts_logs_back_to_the_recovery_point(tmp_path: Path) -> None:
    part = tmp_path / "queue-0"
    part.mkdir()
    first = _batch(0, 3) + _batch(3, 2)
    (part / f"{0:020d}.log").write_bytes(first + _batch(5, 4))
    (part / f"{0:020d}.index").write_bytes(b"\0" * 8)
    (part / f"{9:020d}.log").write_bytes(_batch(9, 1))
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nqueue 0 5\n")
    (tmp_path / "replication-offset-checkpoint.tmp").write_text("unsynced")
    lost = lose_unsynced_writes(tmp_path)
    assert (part / f"{0:020d}.log").read_bytes() == first
    assert not (part / f"{9:020d}.log").exists() and not (part / f"{0:020d}.index").exists()
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()
    assert lost == {"queue-0": len(_batch(5, 4)) + len(_batch(9, 1))}


def test_a_compacted_topics_value_may_be_missing_only_behind_a_later_record_of_its_key() -> None:
    def keyed(e: dict[str, Any], key: str) -> dict[str, Any]:
        return {**e, "topic": "table", "key": key}
    history = [keyed(ack("a", 0, 0), "k"), keyed(ack("b", 0, 1), "j"), keyed(ack("c", 0, 2), "k"),
               keyed(read("b", 0, 1), "j"), keyed(read("c", 0, 2), "k"), DRAINED]
    report = check(history, compacted={"table"})
    assert report.clean and report.stats["compacted_away"] == 1  # a was cleaned: c, at a later offset, has its key
    assert check(history).counts() == {"lost": 1}  # not compacted: a is lost
    latest_missing = history[:3] + [keyed(read("a", 0, 0), "k"), keyed(read("b", 0, 1), "j"), DRAINED]
    assert check(latest_missing, compacted={"table"}).counts() == {"lost": 1}  # c, the last of k, is gone


def test_a_transaction_in_doubt_is_all_or_nothing() -> None:
    history = [txn(1, ["t-1-0", "t-1-1"], "unknown"), txn(2, ["t-2-0", "t-2-1"], "unknown"),
               txn(3, ["t-3-0", "t-3-1"], "unknown"),
               read("t-1-0", 0, 0, topic="txn"), read("t-1-1", 1, 0, topic="txn"), read("t-3-0", 0, 1, topic="txn"),
               DRAINED]
    report = check(history)
    assert report.counts() == {"partial_txn": 1}
    assert report.anomalies["partial_txn"][0]["txn"] == 3


def test_an_acknowledged_aborted_record_must_stay_in_the_log() -> None:
    """Aborted or not, a transactional record the broker acknowledged is in the read_uncommitted drain; the
    read_committed drain must not show it."""
    acked = {**ack("t-1-0", 0, 0), "topic": "txn", "txn": True}
    uncommitted_drain = {"t": 9.0, "type": "drain", "process": "drain-uncommitted", "complete": True, "behind": {}}
    history = [acked, txn(1, ["t-1-0"], "abort"), read("t-1-0", 0, 0, type_="read-uncommitted", topic="txn",
                                                       process="drain-uncommitted"), DRAINED, uncommitted_drain]
    report = check(history)
    assert report.clean, report.summary()
    assert report.stats["aborted_in_log"] == 1
    assert check([h for h in history if h["type"] != "read-uncommitted"]).counts() == {"lost": 1}
    assert check(history + [read("t-1-0", 0, 0, topic="txn")]).counts() == {"aborted_read": 1}


def test_a_group_commit_past_a_record_no_member_polled_is_a_skip() -> None:
    history = [ack("a", 0, 0), ack("b", 0, 1), ack("c", 0, 2), poll("a", 0, 0), poll("b", 0, 1, process="c1"),
               {**commit(0, 2), "group": "g"}, read("a", 0, 0), read("b", 0, 1), read("c", 0, 2), DRAINED]
    for e in history:
        if e["type"] == "poll":
            e["group"] = "g"
    assert check(history).clean  # a and b were polled (by two members) before the commit of 2
    skipping = [e for e in history if e.get("value") != "b" or e["type"] != "poll"]
    report = check(skipping)
    assert report.counts() == {"skipped": 1}
    assert report.anomalies["skipped"][0]["first"] == 1
    late = [{**e, "t": 5.0} if e["type"] == "poll" and e["value"] == "b" else e for e in history]
    assert check(late).counts() == {"skipped": 1}  # polled only after the commit
