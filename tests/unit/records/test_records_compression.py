"""Codec framing: xerial/raw snappy, Kafka-style lz4 frames, gzip, zstd."""

from __future__ import annotations

import gzip
import os
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from kafka import codec as kafka_codec

from pybroker.records import (
    Compression,
    CorruptRecordError,
    UnsupportedCompressionError,
    compress,
    decompress,
)
from pybroker.records.compression import XERIAL_HEADER, snappy_decompress, xerial_snappy_compress

CODECS = list(Compression)
# Mix of compressible text and random bytes, spanning several 32/64 KiB blocks.
PAYLOAD = (b"kafka record payload " * 4000) + os.urandom(70_000) + b"tail"


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", PAYLOAD], ids=["empty", "one", "big"])
def test_roundtrip(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_memoryview_and_bytearray(codec: Compression) -> None:
    src = bytearray(PAYLOAD)
    assert compress(codec, memoryview(src)[5:]) == compress(codec, PAYLOAD[5:])


def test_snappy_writes_xerial_framing() -> None:
    out = compress(Compression.SNAPPY, PAYLOAD)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) == XERIAL_HEADER
    # one block per 32 KiB of input
    pos, blocks, total = 16, 0, 0
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        chunk = snappy.decompress(out[pos + 4 : pos + 4 + n])
        assert len(chunk) <= 32 * 1024
        total += len(chunk)
        blocks += 1
        pos += 4 + n
    assert total == len(PAYLOAD)
    assert blocks == -(-len(PAYLOAD) // (32 * 1024))
    # and matches kafka-python's encoder exactly
    assert out == kafka_codec.snappy_encode(PAYLOAD)


def test_snappy_reads_raw_and_xerial() -> None:
    raw = snappy.compress(PAYLOAD)  # librdkafka style
    assert decompress(Compression.SNAPPY, raw) == PAYLOAD
    assert decompress(Compression.SNAPPY, kafka_codec.snappy_encode(PAYLOAD)) == PAYLOAD
    assert decompress(Compression.SNAPPY, kafka_codec.snappy_encode(PAYLOAD, False)) == PAYLOAD
    # concatenated xerial streams (snappy-java accepts them)
    assert (
        snappy_decompress(xerial_snappy_compress(b"ab") + xerial_snappy_compress(b"cd")) == b"abcd"
    )


def test_snappy_small_raw_payload() -> None:
    # shorter than the 16-byte xerial header -> raw
    assert decompress(Compression.SNAPPY, snappy.compress(b"hi")) == b"hi"


@pytest.mark.parametrize(
    "bad",
    [
        XERIAL_HEADER + b"\x00\x00",  # truncated block length
        XERIAL_HEADER + struct.pack(">i", 100) + b"abc",  # block longer than data
        XERIAL_HEADER + struct.pack(">i", -1),
        b"\xff\xff\xff\xff\xff garbage",
    ],
)
def test_snappy_corrupt(bad: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, bad)


def test_lz4_frame_descriptor_like_kafka() -> None:
    out = compress(Compression.LZ4, PAYLOAD)
    assert out[:4] == b"\x04\x22\x4d\x18"  # magic 0x184D2204, little-endian
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # block independence
    assert not flg & 0x10  # no block checksum
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert (bd >> 4) & 0x7 == 4  # 64 KiB max block
    assert lz4.frame.decompress(out) == PAYLOAD
    assert kafka_codec.lz4_decode(out) == PAYLOAD


def test_lz4_reads_kafka_python_and_concatenated_frames() -> None:
    theirs = kafka_codec.lz4_encode(PAYLOAD)
    assert decompress(Compression.LZ4, theirs) == PAYLOAD
    two = compress(Compression.LZ4, b"ab") + compress(Compression.LZ4, b"cd")
    assert decompress(Compression.LZ4, two) == b"abcd"


def test_gzip_is_gzip_and_deterministic() -> None:
    out = compress(Compression.GZIP, PAYLOAD)
    assert out[:2] == b"\x1f\x8b"
    assert gzip.decompress(out) == PAYLOAD
    assert out == compress(Compression.GZIP, PAYLOAD)
    multi = gzip.compress(b"ab") + gzip.compress(b"cd")
    assert decompress(Compression.GZIP, multi) == b"abcd"


def test_zstd_without_content_size_and_multi_frame() -> None:
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(PAYLOAD)
    assert decompress(Compression.ZSTD, streamed) == PAYLOAD
    two = compress(Compression.ZSTD, b"ab") + compress(Compression.ZSTD, b"cd")
    assert decompress(Compression.ZSTD, two) == b"abcd"
    assert kafka_codec.zstd_decode(compress(Compression.ZSTD, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
def test_truncated_and_garbage(codec: Compression) -> None:
    good = compress(codec, PAYLOAD)
    with pytest.raises(CorruptRecordError):
        decompress(codec, good[: len(good) // 2])
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00garbage-garbage-garbage\x00")


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCompressionError):
        decompress(codec, b"x")
