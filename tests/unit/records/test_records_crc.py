"""The CRC-32C the broker checks batches with is the crc32c package's, though loaded without the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import crc32c as package

from pybroker.records.crc import crc32c

REPO = Path(__file__).resolve().parents[3]


def test_the_check_value_and_the_package_agree() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720, iSCSI)
    data = os.urandom(4096)
    for buffer in (data, bytearray(data), memoryview(data)[17:3001]):
        assert crc32c(buffer) == package.crc32c(buffer)


def test_the_package_init_is_not_run() -> None:
    """Its __init__ imports importlib.metadata (email, csv, zipfile) and argparse: ~1.6 MiB of a broker."""
    code = ("import sys; from pybroker.records.crc import crc32c; "
            "print(crc32c(b'a'), 'crc32c' in sys.modules, 'importlib.metadata' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                          check=True)
    assert proc.stdout.split() == [str(package.crc32c(b"a")), "False", "False"]
