"""mypy over pybroker/ (configured in pyproject.toml's [tool.mypy]) as part of the test run.

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
