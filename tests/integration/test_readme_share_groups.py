"""README.md's "Share groups (queues)" section, run as written: its pytest example as a test file of its own,
through the pytest plugin's session broker (share groups need no set-up there)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.integration.broker_process import REPO


def section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Share groups (queues)\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_pytest_example(tmp_path: Path) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", section(), re.S)
    test_file = tmp_path / "test_readme_share_groups_example.py"
    test_file.write_text(example)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "--basetemp", str(tmp_path / "basetemp"), str(test_file)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
