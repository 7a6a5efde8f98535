"""Compression codecs for the records section of a v2 batch (RECORDS.md §1.5).

Only framing is implemented here; the codecs themselves come from zlib,
python-snappy, lz4 and zstandard, each imported at its first batch: a broker
whose clients never compress does not map them (python-snappy's cramjam alone
is ~1.5 MiB of resident memory). Output framing matches what the Java client
writes so that every client can read batches we build (coordinator records,
tests), and the readers accept every framing seen in the wild (xerial and raw
snappy, multi-member gzip, concatenated lz4/zstd frames, zstd frames without a
content size as written by zstd-jni).
"""

from __future__ import annotations

import importlib
import struct
import sys
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from .constants import Compression
from .errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionError

if TYPE_CHECKING:
    from zstandard import ZstdDecompressor

__all__ = [
    "compress",
    "decompress",
    "xerial_snappy_compress",
    "snappy_decompress",
    "XERIAL_MAGIC",
    "XERIAL_HEADER",
    "XERIAL_BLOCK_SIZE",
    "GZIP_LEVEL",
    "ZSTD_LEVEL",
]

Buffer = bytes | bytearray | memoryview

# 0x82 'SNAPPY' 0x00, then int32 version 1 and int32 min-compatible version 1.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java SnappyOutputStream default
GZIP_LEVEL = 6  # Java Deflater.DEFAULT_COMPRESSION, Kafka's compression.gzip.level default
ZSTD_LEVEL = 3  # zstd default, Kafka's compression.zstd.level default
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip container (header + crc32 trailer)
_INT32 = struct.Struct(">i")
_UNLIMITED = -1
_OUTPUT_STEP = 1 << 20
"""Decompressed bytes taken from a gzip or lz4 decompressor at once: a typical batch in one step."""
# zstd has no output limit per call: feed it input in slices this small, so one call can
# overshoot the limit by at most ~32x this many KiB (a 4-byte RLE block yields 128 KiB).
_ZSTD_INPUT_SLICE = 256


def _too_large(codec: str, max_size: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"{codec} records decompress to more than {max_size} bytes")


# --------------------------------------------------------------------------- gzip


def _gzip_compress(data: Buffer) -> bytes:
    # zlib writes mtime=0, so the output is deterministic (byte-identical rebuilds).
    c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return c.compress(data) + c.flush()


def _gzip_decompress(data: Buffer, max_size: int) -> bytes:
    # Loop over members: GZIPInputStream accepts concatenated gzip members. The output is taken a step at
    # a time, as lz4's: zlib assembles one call's output holding the GIL (tens of ms for 40 MiB, during
    # which the event loop could not run), where the join of the steps lets go of it.
    out: list[bytes] = []
    total = 0
    step = _OUTPUT_STEP if max_size < 0 else min(_OUTPUT_STEP, max_size + 1)
    rest: bytes | memoryview = memoryview(data)
    while True:
        d = zlib.decompressobj(_GZIP_WBITS)
        while not d.eof:
            chunk = d.decompress(rest, step)
            total += len(chunk)
            if 0 <= max_size < total:
                raise _too_large("GZIP", max_size)
            out.append(chunk)
            rest = d.unconsumed_tail
            if not d.eof and len(chunk) < step and not rest:  # all input read, no more output: cut short
                raise CorruptRecordError("truncated gzip stream")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


# --------------------------------------------------------------------------- snappy


def xerial_snappy_compress(data: Buffer, block_size: int = XERIAL_BLOCK_SIZE) -> bytes:
    """snappy-java ``SnappyOutputStream`` framing, as the Java client writes it."""
    import snappy

    mv = memoryview(data)
    parts = [XERIAL_HEADER]
    for i in range(0, len(mv), block_size):
        block = snappy.compress(mv[i : i + block_size])
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _raw_snappy_length(block: memoryview) -> int:
    """The uncompressed length a raw snappy block declares in its varint preamble."""
    value = shift = 0
    for i in range(min(5, len(block))):
        byte = block[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    raise CorruptRecordError("invalid snappy length preamble")


def _raw_snappy_decompress(block: memoryview, budget: int) -> bytes:
    """One raw block, its declared length checked against ``budget`` before anything is allocated."""
    import snappy

    if budget >= 0 and _raw_snappy_length(block) > budget:
        raise RecordTooLargeError(f"snappy block declares {_raw_snappy_length(block)} bytes, over the limit")
    try:
        return snappy.decompress(block)
    except snappy.UncompressError as exc:
        raise CorruptRecordError(f"cannot decompress SNAPPY: {exc}") from exc


def snappy_decompress(data: Buffer, max_size: int = _UNLIMITED) -> bytes:
    """Read xerial-framed snappy if the magic header is present, else one raw block.

    librdkafka writes raw snappy while the Java client, kafka-python and aiokafka
    write the xerial framing, so both must be accepted (RECORDS.md §1.5).
    """
    mv = memoryview(data)
    n = len(mv)
    if n < 16 or mv[:8] != XERIAL_MAGIC:
        return _raw_snappy_decompress(mv, max_size)
    total = 0
    out: list[bytes] = []
    pos = 16
    while pos < n:
        # snappy-java accepts concatenated streams: a new header may start a chunk.
        if n - pos >= 16 and mv[pos : pos + 8] == XERIAL_MAGIC:
            pos += 16
            continue
        if n - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(mv, pos)
        pos += 4
        if length < 0 or pos + length > n:
            raise CorruptRecordError(f"invalid xerial snappy block length {length}")
        block = _raw_snappy_decompress(mv[pos : pos + length], max_size - total if max_size >= 0 else -1)
        total += len(block)
        out.append(block)
        pos += length
    return b"".join(out)


# --------------------------------------------------------------------------- lz4


def _lz4_compress(data: Buffer) -> bytes:
    # Kafka's Lz4BlockOutputStream: 64 KiB independent blocks, no checksums and
    # no content size in the frame descriptor.
    import lz4.frame

    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _lz4_decompress(data: Buffer, max_size: int) -> bytes:
    # lz4.frame.decompress silently ignores bytes after the first frame; the chunked decompressor handles
    # truncation and concatenated frames. Its max_length allocates that much output up front (a 64 MiB bound
    # made a 1 MB batch 5x slower to decompress), so the output is taken a step at a time, and the limit is
    # checked after each step. The extension's functions are called directly: LZ4FrameDecompressor, the
    # Python class over them, copies a memoryview's input to bytes and sets four attributes per call.
    frame = _lz4_frame()
    out: list[bytes] = []
    total = 0
    step = _OUTPUT_STEP if max_size < 0 else min(_OUTPUT_STEP, max_size + 1)  # a small limit: no MiB past it
    rest = memoryview(data)
    context = frame.create_decompression_context()
    while True:
        chunk, read, end_of_frame = frame.decompress_chunk(context, rest, max_length=step)
        total += len(chunk)
        if 0 <= max_size < total:
            raise _too_large("LZ4", max_size)
        out.append(chunk)
        rest = rest[read:]
        if end_of_frame:
            if not rest:  # else the next frame
                return b"".join(out)
            context = frame.create_decompression_context()
        elif not rest:
            raise CorruptRecordError("truncated lz4 frame")


def _lz4_frame() -> ModuleType:
    """lz4.frame, imported at the first lz4 batch (an import statement per batch costs a lookup of its own)."""
    module = sys.modules.get("lz4.frame")
    return importlib.import_module("lz4.frame") if module is None else module


# --------------------------------------------------------------------------- zstd


def _zstd_compress(data: Buffer) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    import zstandard

    try:
        return _zstd_frames(zstandard.ZstdDecompressor(), data, max_size)
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"cannot decompress ZSTD: {exc}") from exc


def _zstd_frames(dctx: ZstdDecompressor, data: Buffer, max_size: int) -> bytes:
    # decompressobj works without a content size in the frame header (zstd-jni
    # streaming output); loop to accept concatenated frames.
    out: list[bytes] = []
    total = 0
    rest: bytes | memoryview = memoryview(data)
    while True:
        d = dctx.decompressobj()
        if max_size < 0:
            out.append(d.decompress(rest))
            rest = d.unused_data
        else:
            fed = 0
            while fed < len(rest) and not d.eof:
                chunk = d.decompress(rest[fed : fed + _ZSTD_INPUT_SLICE])
                fed += _ZSTD_INPUT_SLICE
                total += len(chunk)
                if total > max_size:
                    raise _too_large("ZSTD", max_size)
                out.append(chunk)
            rest = bytes(d.unused_data) + bytes(rest[fed:]) if d.eof else b""
        if not d.eof:
            raise CorruptRecordError("truncated zstd frame")
        if not rest:
            return b"".join(out)


# --------------------------------------------------------------------------- dispatch

_COMPRESSORS: dict[int, Callable[[Buffer], bytes]] = {
    Compression.GZIP: _gzip_compress,
    Compression.SNAPPY: xerial_snappy_compress,
    Compression.LZ4: _lz4_compress,
    Compression.ZSTD: _zstd_compress,
}

_DECOMPRESSORS: dict[int, Callable[[Buffer, int], bytes]] = {
    Compression.GZIP: _gzip_decompress,
    Compression.SNAPPY: snappy_decompress,
    Compression.LZ4: _lz4_decompress,
    Compression.ZSTD: _zstd_decompress,
}


def compress(codec: Compression | int, data: Buffer) -> bytes:
    """Compress a records section with the framing Kafka's Java client uses."""
    if codec == Compression.NONE:
        return bytes(data)
    fn = _COMPRESSORS.get(codec)
    if fn is None:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    return fn(data)


def decompress(codec: Compression | int, data: Buffer, max_size: int | None = None) -> bytes:
    """Decompress a records section; any codec failure becomes CorruptRecordError.

    With ``max_size``, output beyond it raises RecordTooLargeError without being inflated.
    """
    if codec == Compression.NONE:
        return bytes(data)
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    try:
        return fn(data, _UNLIMITED if max_size is None else max_size)
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except (zlib.error, RuntimeError) as exc:  # snappy and zstd errors are translated where they are imported
        raise CorruptRecordError(f"cannot decompress {Compression(codec).name}: {exc}") from exc
