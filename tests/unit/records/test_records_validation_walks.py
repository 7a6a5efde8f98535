"""The faster record walks against the Python one they stand in for: the vectorized one (record_scan, the pure
build's) and the C one (``_walk``, the compiled build's, where it is built). On random valid batches each gives
the same summary as the Python walk (or leaves the batch to it, in the cases it says it does), and on random
damage to them each either gives up (the Python walk then decides) or agrees with the Python walk's summary."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.records import validation
from pybroker.records.batch import validate_batch
from pybroker.records.errors import InvalidRecordError
from pybroker.records.record import encode_record
from pybroker.records.record_scan import scan_records
from pybroker.records.validation import PAUSE_EVERY, ProducePolicy, _scan, validate_produced_batch
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


Summary = tuple[int, int, bool] | None
Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def c_walk() -> Callable[[bytes | memoryview, int, Callable[[], None] | None, int], Summary] | None:
    """``_walk.scan`` where this checkout has it built (the compiled build must: it is what the broker runs)."""
    try:
        module = importlib.import_module("pybroker.records._walk")
    except ImportError:
        assert not validation.COMPILED_WALK, "the compiled build runs without its C walk"
        return None
    assert validation.C_SCAN is module.scan or not validation.COMPILED_WALK
    scan: Callable[[bytes | memoryview, int, Callable[[], None] | None, int], Summary] = module.scan
    return scan


def numpy_unhandled(record: Record) -> bool:
    """Records of 8 KiB or more (a three-byte length) and extreme timestamps are left to the Python walk."""
    delta, key, value, headers = record
    return not -(2**55) < delta < 2**55 or max(len(f or b"") for f in (key, value, *(v for _, v in headers))) >= 8191


def c_unhandled(record: Record) -> bool:
    """A timestamp delta of ten varint bytes (past 63 bits zig-zag encoded) is left to the Python walk."""
    return not -(2**62) <= record[0] < 2**62


WALKS: list[tuple[str, Callable[[bytes | memoryview, int], Summary], Callable[[Record], bool]]] = [
    ("vectorized", scan_records, numpy_unhandled)]
if (_c := c_walk()) is not None:
    WALKS.append(("C", lambda data, count, scan=_c: scan(data, count, None, PAUSE_EVERY), c_unhandled))
WALK_NAMES = [name for name, _, _ in WALKS]


def fast_walk(name: str) -> tuple[Callable[[bytes | memoryview, int], Summary], Callable[[Record], bool]]:
    [(walk, unhandled)] = [(walk, unhandled) for known, walk, unhandled in WALKS if known == name]
    return walk, unhandled


@pytest.mark.parametrize("name", WALK_NAMES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record, min_size=1, max_size=90))
def test_valid_records_summarised_alike(name: str, records: list) -> None:
    walk, unhandled = fast_walk(name)
    data = records_section(records)
    expected = python_walk(data, len(records))
    assert isinstance(expected, tuple)
    assert walk(data, len(records)) == (None if any(unhandled(r) for r in records) else expected)


damage = st.lists(st.tuples(st.sampled_from(["set", "delete", "insert"]), st.floats(0, 1, exclude_max=True),
                            st.integers(0, 255)), min_size=1, max_size=3)


@pytest.mark.parametrize("name", WALK_NAMES)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record, min_size=1, max_size=70), edits=damage, miscount=st.sampled_from([0, 0, 0, -1, 1]))
def test_damaged_records_never_pass_a_faster_walk_alone(name: str, records: list, edits: list, miscount: int) -> None:
    walk, _ = fast_walk(name)
    data = damaged(records_section(records), edits)
    count = max(1, len(records) + miscount)
    fast = walk(data, count)
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


needs_c_walk = pytest.mark.skipif(_c is None, reason="the C walk is not built here (pure build)")


@needs_c_walk
@pytest.mark.parametrize("at", [0, 30, 60])
@pytest.mark.parametrize("poison", POISON)
def test_the_c_walk_leaves_poison_to_the_python_walk(poison: bytes, at: int) -> None:
    data = poisoned(poison, at)
    assert isinstance(python_walk(data, 61), str)
    assert _c is not None and _c(data, 61, None, PAUSE_EVERY) is None


@needs_c_walk
@pytest.mark.parametrize("deltas", [[1, 2, 3], [0, 2, 3], [0, 1, 1], [0, 1, 64]])
def test_the_c_walk_leaves_offset_deltas_other_than_the_index_to_the_python_walk(deltas: list[int]) -> None:
    out = bytearray()
    for delta in deltas:
        encode_record(out, delta, 0, None, b"v", [])
    assert "offset delta" in str(python_walk(bytes(out), 3))
    assert _c is not None and _c(bytes(out), 3, None, PAUSE_EVERY) is None


@needs_c_walk
def test_the_c_walk_reads_any_buffer_in_place_and_pauses_as_the_python_walk() -> None:
    """A view of the request (uncompressed batches are not copied) reads as bytes; ``pause`` is called every
    ``every`` records, and what it raises comes out of the walk."""
    assert _c is not None
    data = poisoned(b"", 61)  # 61 good records
    expected = python_walk(data, 61)
    assert isinstance(expected, tuple)
    paused: list[int] = []
    assert _c(memoryview(bytearray(b"..." + data))[3:], 61, lambda: paused.append(1), 7) == expected
    assert len(paused) == 61 // 7
    assert _c(bytearray(data), 61, None, 1) == expected

    def refuse() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _c(data, 61, refuse, 30)


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
