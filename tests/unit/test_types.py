"""mypy over pybroker/, benchmarks/ and chaos/ (configured in pyproject.toml's [tool.mypy]) as part of the test run.

attr-defined stays enabled: reading an attribute an exception or message does not have (the
Fetch handler once read OffsetOutOfRangeError.log_start_offset, which is log_start) fails here
instead of closing a client's connection.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_errors_in_pybroker(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


SWAPPED_IDS = """
from pybroker.common.ids import BrokerId, LeaderEpoch, next_epoch
from pybroker.zk.paths import LeaderAndIsr

def elect(state: LeaderAndIsr, leader: BrokerId) -> LeaderAndIsr:
    return LeaderAndIsr(state.leader_epoch, leader, state.isr, 0)  # leader and epoch swapped

def bump(state: LeaderAndIsr) -> LeaderAndIsr:
    return LeaderAndIsr(state.leader, state.leader_epoch + 1, state.isr, 0)  # an int, not an epoch

def right(state: LeaderAndIsr, leader: BrokerId) -> LeaderAndIsr:
    return LeaderAndIsr(leader, next_epoch(state.leader_epoch), state.isr, 0)
"""


def test_ids_of_different_kinds_swapped_in_a_call_are_reported(tmp_path):
    """The mistake class common/ids.py's NewTypes catch: two int ids passed in each other's place."""
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # pyproject's config names the package to check
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(tmp_path / "mypy.ini"),
                             "--cache-dir", str(tmp_path / "mypy-cache"), "-c", SWAPPED_IDS],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["6", "9"], result.stdout
    assert all('expected "LeaderEpoch"' in line for line in errors), result.stdout
