"""The one way the broker's small JSON state files (embedded metadata, ACLs, SCRAM credentials, client
quotas, client-metrics subscriptions, features) are replaced: a crash leaves the old file or the new one,
never a torn one, and the new one survives a power loss once this returns. The broker's stores write with
`write_json_durably_off_loop`, so two fsyncs never stall the event loop that serves every client.

A store's write is one step: check, write the file, change the state in memory, under the store's lock.
`common/uncancellable.finishes_once_started` makes it run to its end even when the request that asked for it is cancelled (its
client went away): a cancelled step would otherwise release the lock while its thread still writes
``path.tmp``, and the next step's write would share that file (one rename then fails, or renames the other's
half-written file), or leave on disk a change the memory does not hold."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

__all__ = ["write_json_durably", "write_json_durably_off_loop"]


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


async def write_json_durably_off_loop(path: str, document: Any) -> None:
    """``write_json_durably`` in a worker thread. Callers hold their store's lock across it and change
    their in-memory state only after it returned, so concurrent updates neither interleave nor get ahead
    of the file."""
    await asyncio.to_thread(write_json_durably, path, document)

