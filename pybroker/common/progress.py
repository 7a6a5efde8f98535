"""A one-line progress counter for tool operations that loop over many partitions, topics or groups.

It writes to stderr and only when stderr is a terminal: scripted runs (stderr piped or redirected) get
no extra bytes anywhere, and stdout always carries exactly the lines Kafka's tools print. The line is
redrawn in place with a carriage return, only when the whole percentage changes (so a million-partition
loop does not flood the terminal), and left showing its final count when the operation ends.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TextIO


class Progress:
    """``label: done/total unit (pct%)`` on one terminal line; use as a context manager around the loop."""

    def __init__(self, label: str, total: int, unit: str, *, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self._stream = sys.stderr if stream is None else stream
        self._enabled = total > 0 and self._stream.isatty()
        self._drawn_percent = -1

    def __enter__(self) -> Progress:
        self._draw()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._enabled:
            self._stream.write("\n")  # keep the last count; what follows starts on its own line
            self._stream.flush()

    def advance(self, count: int = 1) -> None:
        self.done = min(self.done + count, self.total)
        self._draw()

    def _draw(self) -> None:
        if not self._enabled:
            return
        percent = self.done * 100 // self.total
        if percent == self._drawn_percent:
            return
        self._drawn_percent = percent
        self._stream.write(f"\r{self.label}: {self.done}/{self.total} {self.unit} ({percent}%)")
        self._stream.flush()
