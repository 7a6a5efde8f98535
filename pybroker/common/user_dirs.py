"""Where a broker started without a config file keeps its data: the user's data directory, per platform."""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP_NAME = "pybroker"


def user_data_dir() -> Path:
    """``$XDG_DATA_HOME/pybroker`` (``~/.local/share/pybroker``) on Linux and other Unixes,
    ``~/Library/Application Support/pybroker`` on macOS, ``%LOCALAPPDATA%\\pybroker`` on Windows."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_NAME
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / APP_NAME
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share"  # the spec ignores a relative one
    return base / APP_NAME
