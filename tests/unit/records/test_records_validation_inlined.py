"""The record walk the broker runs (``_scan``: the varint scanner written out in place) against the one it is
compiled from (``_walk``, which calls ``_varint``): the same summary, the same details and the same error,
on random valid records and on random damage to them. In the compiled build both are mypyc's ``_walk``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.common.native import compiled_modules
from pybroker.records import validation
from pybroker.records.errors import InvalidRecordError
from pybroker.records.varint import decode_varint, decode_varlong, encode_varint, encode_varlong
from tests.unit.records.test_records_validation_walks import damage, damaged, record, records_section

Outcome = tuple[tuple[int, int, bool], list[tuple[int, int, int]]] | str


def outcome(walk: validation._Walk, data: bytes, count: int) -> Outcome:
    details: list[tuple[int, int, int]] = []
    try:
        return walk(data, count, "t-0", details), details
    except InvalidRecordError as e:
        return str(e)


def test_every_varint_call_is_written_out() -> None:
    if "pybroker.records.validation" in compiled_modules():  # mypyc calls _varint in C: nothing to write out
        assert validation._scan is validation._walk and not hasattr(validation._walk, "__code__")
        return
    code = validation._scan.__code__
    assert validation._scan is not validation._walk
    assert "_varint" not in code.co_names and "_varint_tail" in code.co_names
    assert "_varlong" not in code.co_names
    assert validation._walk.__code__.co_names.count("_varint") == 1  # one name, seven calls


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=40))
def test_valid_records_walk_alike(records: list) -> None:
    data = records_section(records)
    expected = outcome(validation._walk, data, len(records))
    assert not isinstance(expected, str)
    assert outcome(validation._scan, data, len(records)) == expected
    assert outcome(validation._scan, data, -1) == outcome(validation._walk, data, -1)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=30), damage, st.sampled_from([0, 0, -1, 1]))
def test_damaged_records_walk_alike(records: list, edits: list, miscount: int) -> None:
    data = damaged(records_section(records), edits)
    count = max(1, len(records) + miscount)
    assert outcome(validation._scan, data, count) == outcome(validation._walk, data, count)


@given(st.integers(-(2**31), 2**31 - 1) | st.sampled_from([-8193, -8192, -65, -64, 63, 64, 8191, 8192]),
       st.binary(max_size=3))
def test_the_varint_scanner_reads_as_the_codec_does(value: int, after: bytes) -> None:
    """``_varint`` (one- and two-byte fast paths, then ``_varint_tail``) against the records codec's decoder, in
    both builds: the compiled build runs ``_varint`` itself, with no inlined copy to compare it to."""
    data = b"\x07" + encode_varint(value) + after
    assert validation._varint(data, 1) == decode_varint(data, 1)


@given(st.integers(-(2**63), 2**63 - 1) | st.sampled_from([-8193, -8192, -65, -64, 63, 64, 8191, 8192, 2**62]),
       st.binary(max_size=3))
def test_the_timestamp_delta_scanner_reads_as_the_codec_does(value: int, after: bytes) -> None:
    """``_varlong`` (a record's timestamp delta, up to ten bytes): its value stays a Python int in the compiled
    build, where the walk's positions and sizes are native 64-bit integers."""
    data = b"\x07" + encode_varlong(value) + after
    assert validation._varlong(data, 1) == decode_varlong(data, 1)


def test_the_varint_scanner_refuses_a_sixth_byte() -> None:
    with pytest.raises(InvalidRecordError, match="varint too long"):
        validation._varint(b"\xff\xff\xff\xff\xff\x01", 0)
