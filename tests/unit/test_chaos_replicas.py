"""The replica comparison finds a follower that diverged from its leader, offset by offset, from the
segment files; compacted topics are compared only where both replicas still hold an offset."""

from __future__ import annotations

from pathlib import Path

from chaos.replicas import compare, log_end, uneven
from pybroker.records import RecordInput, build_batch


def write(root: Path, broker: int, name: str, batches: list[tuple[int, list[tuple[bytes, bytes]]]]) -> None:
    directory = root / f"broker-{broker}" / "logs" / name
    directory.mkdir(parents=True)
    data = b"".join(build_batch([RecordInput(k, v) for k, v in records], base_offset=base, producer_id=1000,
                                producer_epoch=0, base_sequence=base) for base, records in batches)
    (directory / f"{batches[0][0] if batches else 0:020d}.log").write_bytes(data)


LEADER = [(0, [(b"k", b"a"), (b"k", b"b")]), (2, [(b"j", b"c")])]


def test_identical_replicas_are_clean(tmp_path: Path) -> None:
    for broker in (0, 1, 2):
        write(tmp_path, broker, "queue-0", LEADER)
    assert compare(tmp_path) == [] and uneven(tmp_path) == {}
    assert log_end(tmp_path / "broker-0" / "logs" / "queue-0") == 3


def test_a_follower_holding_another_record_at_an_offset_is_divergent(tmp_path: Path) -> None:
    write(tmp_path, 0, "queue-0", LEADER)
    write(tmp_path, 1, "queue-0", [(0, [(b"k", b"a"), (b"k", b"x")]), (2, [(b"j", b"c")])])
    [finding] = compare(tmp_path)
    assert finding["partition"] == "queue-0" and finding["differing_offsets"] == 1
    assert finding["examples"][0]["offset"] == 1


def test_a_missing_offset_counts_unless_the_topic_is_compacted(tmp_path: Path) -> None:
    write(tmp_path, 0, "table-0", LEADER)
    write(tmp_path, 1, "table-0", [(0, [(b"k", b"a")]), (2, [(b"j", b"c")])])  # 1 cleaned away
    assert compare(tmp_path, compacted={"table"}) == []
    [finding] = compare(tmp_path)
    assert finding["examples"][0]["replicas"]["1"] is None


def test_uneven_log_ends_are_reported_when_given(tmp_path: Path) -> None:
    write(tmp_path, 0, "queue-0", LEADER)
    write(tmp_path, 1, "queue-0", LEADER[:1])
    ends = uneven(tmp_path)
    assert ends == {"queue-0": {0: 3, 1: 2}}
    assert compare(tmp_path) == []  # the common part agrees
    assert compare(tmp_path, uneven_ends=ends)[0]["log_ends"] == {0: 3, 1: 2}
