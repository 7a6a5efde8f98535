"""The produce path's record walk for large batches, vectorized with numpy (RECORDS.md §1.2).

Walking a batch's records one varint at a time in Python costs about a microsecond per record,
ten times the rest of an append. Here Python only follows the chain of record lengths (a few
bytecodes per record, it cannot be vectorized: each record's start depends on the previous one);
every other field is then decoded for all records at once, a few numpy operations per field
(a one-byte varint, the common case, is checked by one lookup in a 256-entry table).

The fast path only ever proves a batch valid. Whatever it does not handle (a varint longer than
it expects, a malformed record of any kind) makes it give up and answer None, and the caller
walks the records in pure Python (``validation._scan``), which also raises Kafka's exact error;
the tests check that both walks agree on every input.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["scan_records"]

Positions = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]

_MAX_SIZE_BYTES = 3  # sizes and header counts below 2**20 (a larger size: the Python walk)
_MAX_TIMESTAMP_BYTES = 8  # timestamp deltas within +-2**55 ms keep int64 arithmetic exact
_MAX_RECORDS = 1 << 20  # offset deltas of up to three varint bytes

_ONE_BYTE = np.arange(256, dtype=np.int64)
_ZIGZAG = (_ONE_BYTE >> 1) ^ -(_ONE_BYTE & 1)  # a one-byte varint's value
_NOT_SIZE = (_ONE_BYTE > 0x7F) | (_ONE_BYTE & 1).astype(bool)  # not a one-byte size >= 0
_NOT_NULLABLE_SIZE = _NOT_SIZE & (_ONE_BYTE != 1)  # not a one-byte size >= -1


def scan_records(data: bytes | memoryview, count: int) -> tuple[int, int, bool] | None:
    """(min timestamp delta, max timestamp delta, any keyless) of ``count`` records filling
    ``data`` exactly, each record well-formed as DefaultRecord.readFrom requires and with offset
    delta equal to its index; None when that is not shown here (the caller walks them itself)."""
    if count > _MAX_RECORDS:
        return None
    bounds = _record_bounds(data, count)  # a view is indexed in place, as fast as bytes (no copy of the batch)
    if bounds is None:
        return None
    edges = np.array(bounds, dtype=np.int64)
    try:
        return _scan_fields(np.frombuffer(data, dtype=np.uint8), edges[:-1], edges[1:])
    except _GiveUp:
        return None


class _GiveUp(Exception):
    """Something the fast path does not prove valid: the Python walk decides."""


def _record_bounds(data: bytes | memoryview, count: int) -> list[int] | None:
    """Start of each record and the end of the last (== len(data)), following record lengths
    read as one or two byte varints, sign ignored (both checked afterwards, vectorized)."""
    bounds = [0]
    add = bounds.append
    pos = 0
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
            else:
                pos += 2 + (((b & 0x7F) | (data[pos + 1] << 7)) >> 1)
            add(pos)
    except IndexError:
        return None
    return bounds if pos == len(data) else None


def _scan_fields(buf: Bytes, starts: Positions, ends: Positions) -> tuple[int, int, bool]:
    """Every field after the record lengths, decoded for all records at once. A record too short
    for its fields reads into the next one (or is clipped at the end of the buffer) and so ends
    past its bound, which the last check refuses; an empty record is refused that way too."""
    first = buf[starts]
    second = buf.take(starts + 1, mode="clip")
    _give_up_if((((first & second) | (first << 7)) > 0x7F).any())  # a length over two bytes, or negative
    pos = starts + 2 + (first >> 7)  # past the length and the attributes byte (Kafka ignores it)
    timestamp_deltas, pos = _timestamp_deltas(buf, pos)
    pos = _past_offset_deltas(buf, pos)
    key, pos = _sizes(buf, pos, nullable=True)
    value, pos = _sizes(buf, pos + (key >> 1), nullable=True)  # a null's >> 1 skips nothing
    pos = _past_headers(buf, pos + (value >> 1))
    _give_up_if((pos != ends).any())
    return int(timestamp_deltas.min()), int(timestamp_deltas.max()), bool((key == 1).any())


def _give_up_if(condition: object) -> None:
    if condition:
        raise _GiveUp


def _timestamp_deltas(buf: Bytes, pos: Positions) -> tuple[Positions, Positions]:
    byte = buf.take(pos, mode="clip")
    if (byte > 0x7F).any():
        zigzag, pos = _varints(buf, pos, _MAX_TIMESTAMP_BYTES)
        return (zigzag >> 1) ^ -(zigzag & 1), pos
    return _ZIGZAG.take(byte), pos + 1


def _past_offset_deltas(buf: Bytes, pos: Positions) -> Positions:
    """Checks that record i's offset delta is i by comparing its bytes with i's varint bytes."""
    count = len(pos)
    expected, widths = _offset_delta_varints(count)
    for index, lowest in enumerate((0, 64, 8192)):  # the records whose varint has this byte
        if count <= lowest:
            break
        at = pos if lowest == 0 else pos[lowest:] + index
        _give_up_if((buf.take(at, mode="clip") != expected[index, lowest:count]).any())
    return pos + widths[:count]


_offset_cache: list[tuple[Bytes, Positions]] = []


def _offset_delta_varints(count: int) -> tuple[Bytes, Positions]:
    """Varint bytes (3 x n, unused ones 0) and widths of the zig-zag offset deltas 0..n-1, n >= count."""
    if not _offset_cache or _offset_cache[0][1].size < count:
        size = max(1024, 1 << (count - 1).bit_length())
        zigzag = 2 * np.arange(size, dtype=np.int64)
        widths = 1 + (zigzag > 0x7F) + (zigzag > 0x3FFF)
        expected = np.stack([(zigzag & 0x7F) | (widths > 1) << 7, (zigzag >> 7 & 0x7F) | (widths > 2) << 7,
                             zigzag >> 14]).astype(np.uint8)
        _offset_cache[:] = [(expected, widths)]
    return _offset_cache[0]


def _varints(buf: Bytes, pos: Positions, max_bytes: int) -> tuple[Positions, Positions]:
    """The raw (still zig-zag encoded) varint at each position and the position after it."""
    byte = buf.take(pos, mode="clip")
    more = byte > 0x7F
    value = (byte & 0x7F).astype(np.int64)
    width = np.ones_like(pos)
    for shift in range(7, 7 * max_bytes, 7):
        if not more.any():
            return value, pos + width
        width += more
        byte = buf.take(pos + width - 1, mode="clip")
        value |= np.where(more, (byte & 0x7F).astype(np.int64) << shift, 0)
        more &= byte > 0x7F
    _give_up_if(more.any())
    return value, pos + width


def _sizes(buf: Bytes, pos: Positions, nullable: bool) -> tuple[npt.NDArray[np.integer], Positions]:
    """Zig-zag size (or count) at each position and the position after it. Sizes below -1, and -1
    (zig-zag 1, a null) unless ``nullable``, are left to the Python walk to refuse."""
    byte = buf.take(pos, mode="clip")
    if not (_NOT_NULLABLE_SIZE if nullable else _NOT_SIZE).take(byte).any():
        return byte, pos + 1
    zigzag, pos = _varints(buf, pos, _MAX_SIZE_BYTES)
    _give_up_if(((zigzag & 1) * ((zigzag >> 1) if nullable else 1)).any())
    return zigzag, pos


def _past_headers(buf: Bytes, pos: Positions) -> Positions:
    """Past each record's headers: a count, then per header a key (size >= 0) and a nullable value."""
    counts, pos = _sizes(buf, pos, nullable=False)
    counts >>= 1
    for index in range(int(counts.max())):
        some = None if counts.min() > index else np.flatnonzero(counts > index)  # records with header #index
        at = pos if some is None else pos[some]
        size, at = _sizes(buf, at, nullable=False)  # the key
        size, at = _sizes(buf, at + (size >> 1), nullable=True)  # the value
        if some is None:
            pos = at + (size >> 1)
        else:
            pos[some] = at + (size >> 1)
    return pos
