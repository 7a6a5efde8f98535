"""The chaos checker must be able to fail: one synthetic history per anomaly, and a clean one."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from chaos.checker import check
from chaos.disk import lose_unsynced_writes


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
