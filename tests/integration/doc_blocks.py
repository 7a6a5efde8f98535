"""The fenced code blocks of the Markdown docs, for the tests that run them."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: docs/cli.md, README.md
    line: int  # of the opening fence
    language: str
    text: str

    @property
    def label(self) -> str:
        return f"{self.page}:{self.line}"


def doc_pages() -> list[Path]:
    return sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]


def fenced_blocks(page: Path, language: str) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    name = str(page.relative_to(REPO))
    return [Block(name, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2))
            for match in FENCE.finditer(text) if match.group(1) == language]


def readme_section(title: str) -> str:
    """README.md's ``## title`` section, up to the next one."""
    text = (REPO / "README.md").read_text()
    start = text.index(f"## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


def run_as_pytest_file(example: str, tmp_path: Path, name: str) -> None:
    """Run a page's pytest example, as written, as the one test file of a pytest run of its own (the plugin's
    fixtures come from the installed entry point); it must pass."""
    test_file = tmp_path / f"test_{name}.py"
    test_file.write_text(example)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "--basetemp", str(tmp_path / "basetemp"), str(test_file)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
