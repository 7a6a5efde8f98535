"""Shared fixtures for the records tests."""

from __future__ import annotations

import pytest

# The 83-byte batch of RECORDS.md §1.3 (kafka-python 3.0.12 DefaultRecordBatchBuilder).
# fmt: off
WORKED_EXAMPLE = bytes.fromhex(
    "0000000000000000" "00000047" "00000000" "02" "4bca8908" "0000" "00000001"
    "0000018bcfe56800" "0000018bcfe56805" "00000000000004d2" "0005" "00000007" "00000002"
    "18" "00" "00" "00" "02" "6b" "02" "76" "02" "02" "68" "02" "78"
    "10" "00" "0a" "02" "01" "04" "7676" "00"
)
# fmt: on


@pytest.fixture
def worked_example() -> bytes:
    return WORKED_EXAMPLE
