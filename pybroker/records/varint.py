"""Zig-zag varint/varlong codec used inside v2 records (RECORDS.md §1.3).

Same wire format as Java ``ByteUtils.writeVarint``/``writeVarlong``: zig-zag,
then 7-bit groups least-significant first. Unsigned varints (used by flexible
protocol versions) are provided too since they share the loop.
"""

from __future__ import annotations

from .errors import CorruptRecordError

__all__ = [
    "encode_varint",
    "encode_varlong",
    "encode_unsigned_varint",
    "decode_varint",
    "decode_varlong",
    "decode_unsigned_varint",
    "size_of_varint",
    "size_of_varlong",
    "size_of_unsigned_varint",
    "write_varint",
    "write_varlong",
]

Buffer = bytes | bytearray | memoryview

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _write_unsigned(out: bytearray, u: int) -> None:
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def write_varint(out: bytearray, value: int) -> None:
    """Append a zig-zag int32 varint to ``out`` (no intermediate bytes object)."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    _write_unsigned(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    """Append a zig-zag int64 varlong to ``out``."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    _write_unsigned(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_varint(value: int) -> bytes:
    """Zig-zag int32 varint as bytes."""
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    """Zig-zag int64 varlong as bytes."""
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


def encode_unsigned_varint(value: int) -> bytes:
    """Unsigned (non zig-zag) varint of a uint32, as in flexible protocol versions."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of uint32 range: {value}")
    out = bytearray()
    _write_unsigned(out, value)
    return bytes(out)


def _read_unsigned(buf: Buffer, pos: int, max_bytes: int) -> tuple[int, int]:
    result = 0
    shift = 0
    try:
        for _ in range(max_bytes):
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
    except IndexError:
        raise CorruptRecordError("truncated varint") from None
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes")


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag int32 varint at ``pos``; returns (value, next position)."""
    u, pos = _read_unsigned(buf, pos, 5)
    if u > 0xFFFFFFFF:
        raise CorruptRecordError("varint overflows int32")
    return (u >> 1) ^ -(u & 1), pos


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag int64 varlong at ``pos``; returns (value, next position)."""
    u, pos = _read_unsigned(buf, pos, 10)
    if u > 0xFFFFFFFFFFFFFFFF:
        raise CorruptRecordError("varlong overflows int64")
    return (u >> 1) ^ -(u & 1), pos


def decode_unsigned_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode an unsigned uint32 varint at ``pos``; returns (value, next position)."""
    u, pos = _read_unsigned(buf, pos, 5)
    if u > 0xFFFFFFFF:
        raise CorruptRecordError("unsigned varint overflows uint32")
    return u, pos


def size_of_unsigned_varint(value: int) -> int:
    """Encoded size in bytes of an unsigned varint."""
    n = 1
    while value > 0x7F:
        value >>= 7
        n += 1
    return n


def size_of_varint(value: int) -> int:
    """Encoded size in bytes of a zig-zag int32 varint."""
    return size_of_unsigned_varint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def size_of_varlong(value: int) -> int:
    """Encoded size in bytes of a zig-zag int64 varlong."""
    return size_of_unsigned_varint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)
