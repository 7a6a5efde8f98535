"""A small tmpfs mounted for a test, to make a log dir fail for real (ENOSPC); the test is skipped where
this machine cannot mount one (it needs root and `mount`)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(mount_point: Path, options: str) -> Iterator[Path]:
    """`mount -t tmpfs -o <options>` at `mount_point` (created), unmounted afterwards."""
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
