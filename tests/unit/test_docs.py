"""The docs' facts that come from the code stay true: the generated parts are current (tools/gen_docs.py --check),
every relative link and anchor resolves, and the testing API page names every public member of pybroker.testing."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_generated_parts_are_current() -> None:
    result = subprocess.run([sys.executable, str(REPO / "tools" / "gen_docs.py"), "--check"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(target)
    assert broken == []


def test_the_testing_page_names_every_public_member() -> None:
    import pybroker.testing as testing

    text = (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
    missing = []
    for name in testing.__all__:
        cls = getattr(testing, name)
        if name not in text:
            missing.append(name)
        for member, _ in inspect.getmembers(cls):
            if not member.startswith("_") and not issubclass(cls, BaseException) and f"`{member}" not in text \
                    and f" {member}(" not in text and f"`{member}(" not in text:
                missing.append(f"{name}.{member}")
        if not issubclass(cls, BaseException):
            for parameter in inspect.signature(cls).parameters:
                if parameter not in ("self", "overrides") and parameter not in text:
                    missing.append(f"{name}({parameter}=)")
    assert missing == []
