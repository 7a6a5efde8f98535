"""Kafka wire primitives: a bounds-checked :class:`Reader` and an appending :class:`Writer`.

Everything is big-endian.  The reader never lets ``IndexError``/``struct.error``
escape: truncated or malformed input always raises :class:`DecodeError`, so a
malicious client cannot crash a connection handler with an unexpected exception.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final, Protocol

from pybroker.protocol.errors import DecodeError, EncodeError

__all__ = ["Reader", "Writer", "ZERO_UUID", "uuid_of", "share_uuid", "BytesLike", "Spliced", "FramePart", "UNBOUNDED"]

BytesLike = bytes | bytearray | memoryview
_BYTES_TYPES = (bytes, bytearray, memoryview)
#: Compiled, a builtin class mypyc has no primitive for (memoryview) is looked up in the builtins module at each use
#: (about 250 instructions): read once, here, for the uses every request makes.
_MEMORYVIEW: Final = memoryview


class Spliced(Protocol):
    """Bytes kept outside Python (a log file range) that a records field stands for.

    The writer encodes only their length and leaves a hole; whoever sends the frame splices the
    bytes in (``os.sendfile``), or ``read()`` fills the hole when one contiguous buffer is needed.
    """

    @property
    def size(self) -> int: ...

    def read(self) -> bytes: ...


#: One piece of an encoded frame, in order: bytes to copy, or a hole to splice.
FramePart = BytesLike | Spliced

#: Kafka's null/zero UUID (``Uuid.ZERO_UUID``).
ZERO_UUID = uuid.UUID(int=0)

_UUIDS: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_SIZE = 4096
_ZERO_UUID_BYTES = bytes(16)


def uuid_of(raw: bytes) -> uuid.UUID:
    """The UUID of 16 bytes, shared between requests: topic ids repeat in every Fetch and Produce."""
    found = _UUIDS.get(raw)
    if found is None:
        found = ZERO_UUID if raw == _ZERO_UUID_BYTES else uuid.UUID(bytes=raw)
        if len(_UUIDS) >= _UUID_CACHE_SIZE:
            _UUIDS.clear()
        _UUIDS[raw] = found
    return found


def share_uuid(value: uuid.UUID) -> None:
    """Have `uuid_of` answer ``value`` itself for its bytes (until its cache is next cleared): the broker shares
    its topic ids, so the topic id of a request is the metadata's own object and a lookup by it matches by identity
    rather than through ``UUID.__eq__``, which runs in Python."""
    if len(_UUIDS) >= _UUID_CACHE_SIZE:
        _UUIDS.clear()
    _UUIDS[value.bytes] = value


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_UUID = struct.Struct(">16s")

#: A :class:`Reader`'s default object budget: no bound beyond the input's own size.
UNBOUNDED = 1 << 62

_MAX_UVARINT_BYTES = 5  # 32-bit unsigned varint
_MAX_UVARLONG_BYTES = 10  # 64-bit unsigned varint


class Reader:
    """Sequential reader over a bytes-like object; slices are zero-copy memoryviews.

    ``budget`` is what the decoded objects may still cost, in estimated bytes of Python memory: array codecs
    charge it before building a list, so a small frame cannot become gigabytes of objects (schema.py).
    """

    __slots__ = ("buf", "pos", "end", "budget")

    def __init__(self, data: BytesLike, pos: int = 0, budget: int = UNBOUNDED) -> None:
        mv = data if isinstance(data, _MEMORYVIEW) else _MEMORYVIEW(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        self.buf: memoryview = mv
        self.pos: int = pos
        self.end: int = len(mv)
        self.budget: int = budget

    def remaining(self) -> int:
        """Number of unread bytes."""
        return self.end - self.pos

    def _fail(self, what: str, need: int) -> DecodeError:
        return DecodeError(
            f"truncated input reading {what} at offset {self.pos}: need {need} byte(s), "
            f"{self.end - self.pos} left"
        )

    def _fixed(self, st: struct.Struct, what: str) -> object:
        pos = self.pos
        try:
            (value,) = st.unpack_from(self.buf, pos)
        except struct.error:
            raise self._fail(what, st.size) from None
        self.pos = pos + st.size
        return value

    def read_int8(self) -> int:
        """Signed 8-bit integer."""
        pos = self.pos
        if pos >= self.end:
            raise self._fail("int8", 1)
        self.pos = pos + 1
        b = self.buf[pos]
        return b - 256 if b > 127 else b

    def read_bool(self) -> bool:
        """Boolean (any non-zero byte is true, as in Kafka)."""
        pos = self.pos
        if pos >= self.end:
            raise self._fail("bool", 1)
        self.pos = pos + 1
        return self.buf[pos] != 0

    def read_int16(self) -> int:
        """Signed 16-bit integer."""
        pos = self.pos
        try:
            (value,) = _I16.unpack_from(self.buf, pos)
        except struct.error:
            raise self._fail("int16", 2) from None
        self.pos = pos + 2
        return value  # type: ignore[no-any-return]

    def read_uint16(self) -> int:
        """Unsigned 16-bit integer."""
        pos = self.pos
        try:
            (value,) = _U16.unpack_from(self.buf, pos)
        except struct.error:
            raise self._fail("uint16", 2) from None
        self.pos = pos + 2
        return value  # type: ignore[no-any-return]

    def read_int32(self) -> int:
        """Signed 32-bit integer."""
        pos = self.pos
        try:
            (value,) = _I32.unpack_from(self.buf, pos)
        except struct.error:
            raise self._fail("int32", 4) from None
        self.pos = pos + 4
        return value  # type: ignore[no-any-return]

    def read_uint32(self) -> int:
        """Unsigned 32-bit integer."""
        pos = self.pos
        try:
            (value,) = _U32.unpack_from(self.buf, pos)
        except struct.error:
            raise self._fail("uint32", 4) from None
        self.pos = pos + 4
        return value  # type: ignore[no-any-return]

    def read_int64(self) -> int:
        """Signed 64-bit integer."""
        pos = self.pos
        try:
            (value,) = _I64.unpack_from(self.buf, pos)
        except struct.error:
            raise self._fail("int64", 8) from None
        self.pos = pos + 8
        return value  # type: ignore[no-any-return]

    def read_float64(self) -> float:
        """IEEE-754 double."""
        pos = self.pos
        try:
            (value,) = _F64.unpack_from(self.buf, pos)
        except struct.error:
            raise self._fail("float64", 8) from None
        self.pos = pos + 8
        return value  # type: ignore[no-any-return]

    def read_uuid(self) -> uuid.UUID:
        """16-byte UUID."""
        raw: bytes = self._fixed(_UUID, "uuid")  # type: ignore[assignment]
        return uuid_of(raw)

    def _read_uvar(self, max_bytes: int, what: str) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        if pos < end:
            b = buf[pos]
            if b < 0x80:  # fast path: one byte
                self.pos = pos + 1
                return b
        result = 0
        shift = 0
        for _ in range(max_bytes):
            if pos >= end:
                raise self._fail(what, 1)
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return result
            shift += 7
        raise DecodeError(f"{what} at offset {self.pos} is longer than {max_bytes} bytes")

    def read_uvarint(self) -> int:
        """Unsigned varint (at most 5 bytes, 32-bit)."""
        v = self._read_uvar(_MAX_UVARINT_BYTES, "unsigned varint")
        if v > 0xFFFFFFFF:
            raise DecodeError(f"unsigned varint {v} does not fit in 32 bits")
        return v

    def read_varint(self) -> int:
        """Zigzag-encoded signed 32-bit varint."""
        v = self.read_uvarint()
        return (v >> 1) ^ -(v & 1)

    def read_uvarlong(self) -> int:
        """Unsigned varint of up to 64 bits."""
        v = self._read_uvar(_MAX_UVARLONG_BYTES, "unsigned varlong")
        if v > 0xFFFFFFFFFFFFFFFF:
            raise DecodeError(f"unsigned varlong {v} does not fit in 64 bits")
        return v

    def read_varlong(self) -> int:
        """Zigzag-encoded signed 64-bit varint."""
        v = self.read_uvarlong()
        return (v >> 1) ^ -(v & 1)

    def read_raw(self, n: int) -> memoryview:
        """Next ``n`` bytes as a zero-copy memoryview slice."""
        pos = self.pos
        if n < 0 or n > self.end - pos:
            raise self._fail("raw bytes", n)
        self.pos = pos + n
        return self.buf[pos : pos + n]

    def _utf8(self, n: int) -> str:
        raw = self.read_raw(n)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid UTF-8 in string: {e}") from None

    def read_string(self) -> str | None:
        """int16-length string; ``None`` when the length is -1."""
        n = self.read_int16()
        if n < 0:
            if n == -1:
                return None
            raise DecodeError(f"invalid string length {n}")
        return self._utf8(n)

    def read_compact_string(self) -> str | None:
        """Unsigned-varint (length+1) string; ``None`` when the prefix is 0."""
        n = self.read_uvarint() - 1
        if n < 0:
            return None
        return self._utf8(n)

    def read_bytes_view(self) -> memoryview | None:
        """int32-length bytes as a zero-copy view; ``None`` when the length is -1."""
        n = self.read_int32()
        if n < 0:
            if n == -1:
                return None
            raise DecodeError(f"invalid bytes length {n}")
        return self.read_raw(n)

    def read_compact_bytes_view(self) -> memoryview | None:
        """Unsigned-varint (length+1) bytes as a zero-copy view; ``None`` when null."""
        n = self.read_uvarint() - 1
        if n < 0:
            return None
        return self.read_raw(n)

    def read_bytes(self) -> bytes | None:
        """int32-length bytes (copied); ``None`` when the length is -1."""
        v = self.read_bytes_view()
        return None if v is None else bytes(v)

    def read_compact_bytes(self) -> bytes | None:
        """Compact bytes (copied); ``None`` when null."""
        v = self.read_compact_bytes_view()
        return None if v is None else bytes(v)


class Writer:
    """Appends encoded primitives to one growing bytearray.

    A records field holding a :class:`Spliced` range is written as its length prefix plus a
    hole: ``holes`` lists ``(position in buf, range)`` in order, and :meth:`parts` interleaves them.
    """

    __slots__ = ("buf", "holes")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.holes: list[tuple[int, Spliced]] = []

    def getvalue(self) -> bytes:
        """Everything written so far as immutable bytes, holes filled by reading their ranges."""
        if not self.holes:
            return bytes(self.buf)
        return b"".join(part if isinstance(part, _BYTES_TYPES) else part.read() for part in self.parts())

    @property
    def encoded_size(self) -> int:
        """Bytes the encoding takes on the wire, holes included."""
        if not self.holes:
            return len(self.buf)
        return len(self.buf) + sum(hole.size for _, hole in self.holes)

    def parts(self) -> list[FramePart]:
        """The encoding as ordered pieces: zero-copy views of ``buf`` with the holes between them."""
        view = _MEMORYVIEW(self.buf)
        if not self.holes:
            return [view]
        pieces: list[FramePart] = []
        start = 0
        for position, hole in self.holes:
            if position > start:
                pieces.append(view[start:position])
            pieces.append(hole)
            start = position
        if start < len(self.buf) or not pieces:
            pieces.append(view[start:])
        return pieces

    def __len__(self) -> int:
        return len(self.buf)

    def write_raw(self, data: BytesLike) -> None:
        """Append bytes verbatim."""
        self.buf += data

    def write_int8(self, v: int) -> None:
        """Signed 8-bit integer."""
        self.buf += _I8.pack(v)

    def write_bool(self, v: bool) -> None:
        """Boolean as one byte 0/1."""
        self.buf.append(1 if v else 0)

    def write_int16(self, v: int) -> None:
        """Signed 16-bit integer."""
        self.buf += _I16.pack(v)

    def write_uint16(self, v: int) -> None:
        """Unsigned 16-bit integer."""
        self.buf += _U16.pack(v)

    def write_int32(self, v: int) -> None:
        """Signed 32-bit integer."""
        self.buf += _I32.pack(v)

    def write_uint32(self, v: int) -> None:
        """Unsigned 32-bit integer."""
        self.buf += _U32.pack(v)

    def write_int64(self, v: int) -> None:
        """Signed 64-bit integer."""
        self.buf += _I64.pack(v)

    def write_float64(self, v: float) -> None:
        """IEEE-754 double."""
        self.buf += _F64.pack(v)

    def write_uuid(self, v: uuid.UUID | None) -> None:
        """16-byte UUID (``None`` is written as the zero UUID)."""
        self.buf += (v or ZERO_UUID).bytes

    def write_uvarint(self, v: int) -> None:
        """Unsigned varint (32-bit)."""
        if 0 <= v < 0x80:
            self.buf.append(v)
            return
        if v < 0 or v > 0xFFFFFFFF:
            raise EncodeError(f"unsigned varint out of range: {v}")
        self._uvar(v)

    def write_varint(self, v: int) -> None:
        """Zigzag-encoded signed 32-bit varint."""
        if not -0x80000000 <= v <= 0x7FFFFFFF:
            raise EncodeError(f"varint out of range: {v}")
        self._uvar(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def write_varlong(self, v: int) -> None:
        """Zigzag-encoded signed 64-bit varint."""
        if not -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
            raise EncodeError(f"varlong out of range: {v}")
        self._uvar(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def _uvar(self, v: int) -> None:
        buf = self.buf
        while v >= 0x80:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def write_string(self, v: str | None) -> None:
        """int16-length string; ``None`` writes length -1."""
        if v is None:
            self.buf += b"\xff\xff"
            return
        raw = v.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise EncodeError(f"string of {len(raw)} bytes is too long for an int16 length")
        self.buf += _I16.pack(len(raw))
        self.buf += raw

    def write_compact_string(self, v: str | None) -> None:
        """Unsigned-varint (length+1) string; ``None`` writes 0."""
        if v is None:
            self.buf.append(0)
            return
        raw = v.encode("utf-8")
        self.write_uvarint(len(raw) + 1)
        self.buf += raw

    def write_bytes(self, v: BytesLike | None) -> None:
        """int32-length bytes; ``None`` writes length -1."""
        if v is None:
            self.buf += b"\xff\xff\xff\xff"
            return
        self.buf += _I32.pack(len(v) if not isinstance(v, _MEMORYVIEW) else v.nbytes)
        self.buf += v

    def write_compact_bytes(self, v: BytesLike | None) -> None:
        """Unsigned-varint (length+1) bytes; ``None`` writes 0."""
        if v is None:
            self.buf.append(0)
            return
        self.write_uvarint((len(v) if not isinstance(v, _MEMORYVIEW) else v.nbytes) + 1)
        self.buf += v

    def write_records(self, v: BytesLike | Spliced | None) -> None:
        """Like :meth:`write_bytes`; a :class:`Spliced` range becomes a hole after its length."""
        if v is None or isinstance(v, _BYTES_TYPES):
            self.write_bytes(v)
            return
        self.buf += _I32.pack(v.size)
        self.holes.append((len(self.buf), v))

    def write_compact_records(self, v: BytesLike | Spliced | None) -> None:
        """Like :meth:`write_compact_bytes`; a :class:`Spliced` range becomes a hole after its length."""
        if type(v) is bytes:  # a Fetch answer's records read into memory, or none (b""): no isinstance chain
            self.write_uvarint(len(v) + 1)
            if v:
                self.buf += v
            return
        if v is None or isinstance(v, _BYTES_TYPES):
            self.write_compact_bytes(v)
            return
        self.write_uvarint(v.size + 1)
        self.holes.append((len(self.buf), v))
