"""Reader/Writer primitives: encodings, bounds checks, error types."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybroker.protocol.errors import DecodeError, EncodeError
from pybroker.protocol.primitives import ZERO_UUID, Reader, Writer


@pytest.mark.parametrize("value,encoded", [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**32 - 1, "ffffffff0f"),
])
def test_uvarint_vectors(value: int, encoded: str) -> None:
    w = Writer()
    w.write_uvarint(value)
    assert w.getvalue().hex() == encoded
    assert Reader(bytes.fromhex(encoded)).read_uvarint() == value


@pytest.mark.parametrize("value,encoded", [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"),
                                           (64, "8001")])
def test_varint_zigzag_vectors(value: int, encoded: str) -> None:
    w = Writer()
    w.write_varint(value)
    assert w.getvalue().hex() == encoded
    assert Reader(bytes.fromhex(encoded)).read_varint() == value


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_roundtrip(v: int) -> None:
    w = Writer()
    w.write_varlong(v)
    r = Reader(w.getvalue())
    assert r.read_varlong() == v and r.remaining() == 0


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_roundtrip(v: int) -> None:
    w = Writer()
    w.write_varint(v)
    assert Reader(w.getvalue()).read_varint() == v


@given(st.text(max_size=50) | st.none())
def test_strings_roundtrip(s: str | None) -> None:
    w = Writer()
    w.write_string(s)
    w.write_compact_string(s)
    r = Reader(w.getvalue())
    assert r.read_string() == s and r.read_compact_string() == s and r.remaining() == 0


@given(st.binary(max_size=50) | st.none())
def test_bytes_roundtrip(b: bytes | None) -> None:
    w = Writer()
    w.write_bytes(b)
    w.write_compact_bytes(b)
    r = Reader(w.getvalue())
    assert r.read_bytes() == b and r.read_compact_bytes() == b


def test_fixed_width_and_uuid() -> None:
    u = uuid.uuid4()
    w = Writer()
    for meth, v in [("int8", -5), ("int16", -300), ("uint16", 65535), ("int32", -(2**31)),
                    ("uint32", 2**32 - 1), ("int64", 2**63 - 1), ("float64", 1.25)]:
        getattr(w, f"write_{meth}")(v)
    w.write_uuid(u)
    w.write_uuid(None)
    w.write_bool(True)
    r = Reader(memoryview(w.getvalue()))
    assert [r.read_int8(), r.read_int16(), r.read_uint16(), r.read_int32(), r.read_uint32(),
            r.read_int64(), r.read_float64()] == [-5, -300, 65535, -(2**31), 2**32 - 1,
                                                  2**63 - 1, 1.25]
    assert r.read_uuid() == u and r.read_uuid() == ZERO_UUID and r.read_bool() is True
    assert r.remaining() == 0


@pytest.mark.parametrize("method", ["read_int8", "read_int16", "read_uint16", "read_int32",
                                    "read_uint32", "read_int64", "read_float64", "read_uuid",
                                    "read_uvarint", "read_varint", "read_varlong", "read_string",
                                    "read_compact_string", "read_bytes", "read_compact_bytes",
                                    "read_bool"])
def test_truncated_input_raises_decode_error(method: str) -> None:
    with pytest.raises(DecodeError):
        getattr(Reader(b""), method)()
    if method in ("read_string", "read_compact_string", "read_bytes", "read_compact_bytes"):
        with pytest.raises(DecodeError):  # a length prefix claiming more data than present
            getattr(Reader(b"\x7f\x7f\x7f\x7f\x7f"), method)()


def test_invalid_inputs() -> None:
    with pytest.raises(DecodeError):
        Reader(b"\xff\xff\xff\xff\xff\x01").read_uvarint()  # too long
    with pytest.raises(DecodeError):
        Reader(b"\xff\xfe").read_string()  # length -2
    with pytest.raises(DecodeError):
        Reader(b"\x00\x02\xff\xfe").read_string()  # invalid utf-8
    with pytest.raises(DecodeError):
        Reader(b"\xff\xff\xff\xfe").read_bytes()
    assert issubclass(DecodeError, ValueError)
    with pytest.raises(EncodeError):
        Writer().write_uvarint(-1)
    with pytest.raises(EncodeError):
        Writer().write_string("x" * 40000)


def test_views_are_zero_copy() -> None:
    data = b"\x00\x00\x00\x03abc"
    v = Reader(data).read_bytes_view()
    assert v is not None and v.obj is data and bytes(v) == b"abc"
