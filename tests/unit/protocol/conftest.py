"""Make the repository and this directory's helpers importable in any pytest import mode."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
for path in (REPO, HERE):  # HERE: protocol_samples.py, also under --import-mode=importlib
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
