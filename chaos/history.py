"""The history of a round: every operation and fault as one JSON object, in the order seen."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterable


class History:
    """Thread-safe append-only list of events; `t` is seconds since the round started."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return round(time.monotonic() - self.start, 3)

    def add(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"t": self.now(), "type": type_, **fields}
        with self._lock:
            self.events.append(event)
        return event

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def dump(self, path: Path) -> None:
        write_jsonl(path, self.snapshot())


def write_jsonl(path: Path, events: Iterable[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        for event in events:
            f.write(json.dumps(event, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
