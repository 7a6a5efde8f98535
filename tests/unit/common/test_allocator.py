"""pybroker.common.allocator in fresh interpreters: after `tune`, a 2 MiB block comes from glibc's heap (not a
mapping of its own) and stays there once freed; the environment's settings win; nothing else is touched."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pybroker.common import allocator
from pybroker.common.allocator import is_glibc

pytestmark = pytest.mark.skipif(not is_glibc(), reason="glibc's allocator only")

#: Prints what `tune` said, whether a fresh 2 MiB block lies in [heap], and whether the heap still reaches past it
#: once it is freed (whether the heap grew for it depends on the free space the interpreter's start left there).
PROBE = textwrap.dedent("""
    import ctypes, sys
    from pybroker.common import allocator

    def heap():
        for line in open("/proc/self/maps"):
            if line.rstrip().endswith("[heap]"):
                start, end = (int(part, 16) for part in line.split()[0].split("-"))
                return start, end
        return 0, 0

    said = allocator.tune() if sys.argv[1] == "tune" else "untouched"
    block = bytearray(2 << 20)
    address = ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block))
    start, end = heap()
    inside = start <= address < end
    del block
    print(said)
    print(inside, heap()[1] >= address + (2 << 20))  # the heap still holds the freed block's pages: not trimmed
""")


def probe(mode: str, **env: str) -> list[str]:
    clean = {key: value for key, value in os.environ.items()
             if not key.startswith("MALLOC_") and key != "GLIBC_TUNABLES"}
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                          env={**clean, **env}, timeout=60)
    return done.stdout.splitlines()


def test_tune_serves_a_big_block_from_the_heap_and_keeps_it_there_once_freed() -> None:
    said, placed = probe("tune")
    assert said == "glibc malloc, mmap threshold 8 MiB, trim threshold 32 MiB"
    assert placed == "True True"


def test_without_tune_the_same_block_is_a_mapping_of_its_own() -> None:
    """The probe's own control: glibc's defaults map the block, so the test above can fail."""
    assert probe("untouched")[1] == "False False"


@pytest.mark.parametrize("env", [{"MALLOC_MMAP_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}])
def test_the_environment_wins(env: dict[str, str]) -> None:
    said, placed = probe("tune", **env)
    assert said.startswith("glibc malloc as the environment sets it (")
    assert placed == "False False"


def test_another_c_library_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """musl and macOS have no CS_GNU_LIBC_VERSION: os.confstr raises, and tune returns before any mallopt."""
    def unknown(name: str) -> str:
        raise ValueError(f"unrecognized configuration name {name}")

    monkeypatch.setattr(allocator.os, "confstr", unknown)
    monkeypatch.setattr(allocator.ctypes, "CDLL", None)  # a call would raise TypeError
    assert allocator.tune() == "the C library's defaults (not glibc)"
