"""Corrupted input must only ever raise DecodeError (never IndexError, struct.error, ...)."""

from __future__ import annotations

import random
import zlib

import pytest
from protocol_samples import all_cases, sample

from pybroker.protocol.errors import DecodeError
from pybroker.protocol.frame import FrameDecoder, decode_request_header
from pybroker.protocol.schema import Message

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.__name__}-v{v}" for c, v in CASES])
def test_mutated_bodies_only_raise_decode_error(case: tuple[type[Message], int]) -> None:
    cls, version = case
    rnd = random.Random(zlib.crc32(f"fuzz:{cls.__name__}:{version}".encode()))
    data = bytearray(sample(cls, version, rnd, null_rate=0.2).encode(version))
    for _ in range(12):
        mutated = bytearray(data)
        op = rnd.randrange(3)
        if op == 0 and mutated:  # flip bytes
            for _ in range(rnd.randint(1, 3)):
                mutated[rnd.randrange(len(mutated))] = rnd.randrange(256)
        elif op == 1:  # truncate
            del mutated[rnd.randrange(len(mutated) + 1):]
        else:  # garbage
            mutated = bytearray(rnd.randbytes(rnd.randint(0, 40)))
        try:
            cls.decode(bytes(mutated), version)
        except DecodeError:
            pass


def test_random_frames_only_raise_protocol_errors() -> None:
    rnd = random.Random(1234)
    for _ in range(2000):
        blob = rnd.randbytes(rnd.randint(0, 30))
        try:
            decode_request_header(blob)
        except DecodeError:
            pass
        dec = FrameDecoder(64)
        try:
            dec.feed(blob)
        except (DecodeError, Exception) as e:  # FrameTooLarge is not a DecodeError
            assert type(e).__name__ in ("DecodeError", "FrameTooLarge"), e
