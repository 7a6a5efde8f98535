"""The fenced code blocks of the Markdown docs, for the tests that run them."""

from __future__ import annotations

import re
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
