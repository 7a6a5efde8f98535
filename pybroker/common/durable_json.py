"""The one way the broker's small JSON state files (embedded metadata, ACLs, SCRAM credentials, client
quotas, client-metrics subscriptions) are replaced: a crash leaves the old file or the new one, never a
torn one, and the new one survives a power loss once this returns."""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["write_json_durably"]


def write_json_durably(path: str, document: Any) -> None:
    """Write ``document`` to ``path.tmp``, fsync it, rename it over ``path`` and fsync the directory
    (which makes the rename itself durable)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
