"""Zig-zag varint/varlong helpers against known encodings and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybroker.records import CorruptRecordError
from pybroker.records.varint import (
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
)

KNOWN = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN)
def test_known_varints(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)
    assert encode_varlong(value) == encoded  # same zig-zag for small magnitudes


def test_varlong_extremes() -> None:
    assert encode_varlong(2**63 - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert decode_varlong(encode_varlong(-(2**63))) == (-(2**63), 10)


def test_out_of_range() -> None:
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(2**63)
    with pytest.raises(ValueError):
        encode_unsigned_varint(-1)


def test_truncated_and_too_long() -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80\x80")
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80" * 5 + b"\x00")
    with pytest.raises(CorruptRecordError):
        decode_varlong(b"\x80" * 10 + b"\x00")


def test_decode_at_position() -> None:
    buf = b"\xaa" + encode_varint(300) + encode_varint(-7)
    v, pos = decode_varint(buf, 1)
    assert v == 300
    assert decode_varint(buf, pos) == (-7, len(buf))


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_roundtrip(v: int) -> None:
    enc = encode_varint(v)
    assert decode_varint(enc) == (v, len(enc)) and size_of_varint(v) == len(enc)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_roundtrip(v: int) -> None:
    enc = encode_varlong(v)
    assert decode_varlong(enc) == (v, len(enc)) and size_of_varlong(v) == len(enc)


@given(st.integers(0, 2**32 - 1))
def test_unsigned_roundtrip(v: int) -> None:
    enc = encode_unsigned_varint(v)
    assert decode_unsigned_varint(enc) == (v, len(enc))
    assert size_of_unsigned_varint(v) == len(enc)
