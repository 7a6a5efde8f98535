"""README.md's "Share groups (queues)" section, run as written: its pytest example as a test file of its own,
through the pytest plugin's session broker (share groups need no set-up there)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.doc_blocks import readme_section, run_as_pytest_file


def test_the_pytest_example(tmp_path: Path) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", readme_section("Share groups (queues)"), re.S)
    run_as_pytest_file(example, tmp_path, "readme_share_groups_example")
