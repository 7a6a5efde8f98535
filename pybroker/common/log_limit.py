"""Rate-limited log lines for events a client can repeat at will (bad frames, failing requests).

Without a limit one client sending 50,000 bad frames writes 50,000 log lines and can fill the disk.
A `LogLimiter` writes at most one line per `interval` seconds for each *reason* (a short fixed key
chosen by the caller, not the formatted text, so the set of reasons stays small); the first line
after a suppressed stretch says how many lines were dropped since the previous one, as the Linux
kernel's printk rate limit does ("N callbacks suppressed").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

DEFAULT_INTERVAL_S = 10.0


@dataclass(slots=True)
class _Window:
    opened: float
    suppressed: int = 0


@dataclass
class LogLimiter:
    """At most one line per `interval` seconds per reason; `clock` is injectable for tests."""

    logger: logging.Logger
    interval: float = DEFAULT_INTERVAL_S
    clock: Callable[[], float] = time.monotonic
    _windows: dict[str, _Window] = field(default_factory=dict, repr=False)

    def log(self, level: int, reason: str, msg: str, *args: Any, exc_info: BaseException | None = None) -> bool:
        """Log `msg % args` unless `reason` already logged within the interval; True if a line was written."""
        if not self.logger.isEnabledFor(level):
            return False
        now = self.clock()
        window = self._windows.get(reason)
        if window is not None and now - window.opened < self.interval:
            window.suppressed += 1
            return False
        self._windows[reason] = _Window(now)
        if window is not None and window.suppressed:
            msg += " (%d similar lines suppressed since the previous one)"
            args += (window.suppressed,)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, reason: str, msg: str, *args: Any) -> bool:
        return self.log(logging.WARNING, reason, msg, *args)
