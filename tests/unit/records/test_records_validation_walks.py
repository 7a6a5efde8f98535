"""The vectorized record walk (record_scan) against the Python one it stands in for: on random
valid batches both give the same summary, and on random damage to them the vectorized walk
either gives up (the Python walk then decides) or agrees with the Python walk's summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.records import validation
from pybroker.records.batch import validate_batch
from pybroker.records.errors import InvalidRecordError
from pybroker.records.record import encode_record
from pybroker.records.record_scan import scan_records
from pybroker.records.validation import ProducePolicy, _scan, validate_produced_batch
from tests.integration.test_poison_batches import header_with_negative_key_size, raw_batch

NOW = 1_700_000_000_000
REPO = Path(__file__).resolve().parents[3]


def sized(size: int) -> bytes:
    return bytes(range(256)) * (size // 256) + bytes(range(size % 256))


fields = st.none() | st.integers(0, 200).map(sized) | st.sampled_from([sized(8191), sized(8192), sized(20_000)])
timestamp_deltas = st.integers(-70, 70) | st.integers(-(2**42), 2**42) | st.sampled_from([-(2**63), 2**62])
record = st.tuples(timestamp_deltas, fields, fields,
                   st.lists(st.tuples(st.text(max_size=5), fields), max_size=3))


def records_section(records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    out = bytearray()
    for index, (delta, key, value, headers) in enumerate(records):
        encode_record(out, index, delta, key, value, headers)
    return bytes(out)


def python_walk(data: bytes, count: int) -> tuple[int, int, bool] | str:
    try:
        return _scan(data, count, "t-0", None)
    except InvalidRecordError as e:
        return str(e)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=90))
def test_valid_records_summarised_alike(records: list) -> None:
    data = records_section(records)
    expected = python_walk(data, len(records))
    assert isinstance(expected, tuple)
    # It leaves records of 8 KiB or more (a three-byte length) and extreme timestamps to the Python walk.
    unhandled = any(not -(2**55) < delta < 2**55 or max(len(f or b"") for f in (key, value, *(v for _, v in headers)))
                    >= 8191 for delta, key, value, headers in records)
    assert scan_records(data, len(records)) == (None if unhandled else expected)


damage = st.lists(st.tuples(st.sampled_from(["set", "delete", "insert"]), st.floats(0, 1, exclude_max=True),
                            st.integers(0, 255)), min_size=1, max_size=3)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=70), damage, st.sampled_from([0, 0, 0, -1, 1]))
def test_damaged_records_never_pass_the_vectorized_walk_alone(records: list, edits: list, miscount: int) -> None:
    data = damaged(records_section(records), edits)
    count = max(1, len(records) + miscount)
    fast = scan_records(data, count)
    if fast is not None:
        assert fast == python_walk(data, count)


def damaged(data: bytes, edits: list[tuple[str, float, int]]) -> bytes:
    """``data`` with each edit (set, delete or insert a byte at a fraction of its length) applied in turn."""
    out = bytearray(data)
    for op, where, byte in edits:
        at = int(where * len(out))
        if op == "set":
            out[at] = byte
        elif op == "delete":
            del out[at]
        else:
            out.insert(at, byte)
    return bytes(out)


def poisoned(poison: bytes, at: int, good: int = 60) -> bytes:
    """A records section of ``good`` well-formed records with ``poison`` as record number ``at``."""
    out = bytearray()
    for index in range(good + 1):
        if index == at:
            out += poison
        else:
            encode_record(out, index, 0, b"k%d" % index, b"v" * 80, [("h", b"x")] if index % 3 else [])
    return bytes(out)


POISON = [
    b"\x0c\x00\x00\x00\x02k\x02v",  # header count missing
    b"\x0e\x00\x00\x00\x02k\x02v\x01",  # header count -1
    b"\x0e\x00\x00\x00\x03k\x02v\x00",  # key size -2
    b"\x12\x00\x00\x00\x02k\x02v\x00\x00",  # a byte left over in the record
    b"\x00",  # an empty record
    b"\x03\x00",  # a negative length
    header_with_negative_key_size(),
]


@pytest.mark.parametrize("at", [0, 30, 60])
@pytest.mark.parametrize("poison", POISON)
def test_poison_in_a_large_batch_gets_the_python_walks_answer(poison: bytes, at: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    batch = raw_batch(poisoned(poison, at), 61, base_timestamp=NOW)

    def verdict() -> str:
        try:
            validate_produced_batch(validate_batch(batch, check_counts=False), ProducePolicy(), NOW, "t-0")
        except InvalidRecordError as e:
            return f"{type(e).__name__}: {e}"
        return "passed"

    vectorized = verdict()
    monkeypatch.setattr(validation, "MIN_RECORDS", 10**9)
    assert vectorized == verdict()
    if "offset delta" not in vectorized:  # an edit that shifts the offsets of the records after it
        assert vectorized != "passed"


def test_without_numpy_large_batches_are_walked_in_python() -> None:
    """numpy is an optional extra: without it a large batch is checked by the Python walk, faults named as ever."""
    script = """
import sys
sys.modules["numpy"] = None  # as if the numpy extra were not installed
from pybroker.records import validation
from pybroker.records.batch import validate_batch
from pybroker.records.errors import InvalidRecordError
from pybroker.records.validation import ProducePolicy, validate_produced_batch
from tests.integration.test_poison_batches import raw_batch
from pybroker.records.record import encode_record

out = bytearray()
for index in range(200):
    encode_record(out, index, index, b"k%d" % index, b"v", [])
batch = validate_batch(raw_batch(bytes(out), 200, base_timestamp=1), check_counts=False)
assert validate_produced_batch(batch, ProducePolicy(), 10, "t-0") == 200
assert validation.vectorized_scan() is None
bad = validate_batch(raw_batch(bytes(out), 201, base_timestamp=1), check_counts=False)
try:
    validate_produced_batch(bad, ProducePolicy(), 10, "t-0")
except InvalidRecordError as exc:
    print(exc)
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Incorrect declared batch size")  # the Python walk names the fault
