"""LogLimiter: one line per interval per reason, and the next line counts what was dropped."""

from __future__ import annotations

import logging

import pytest

from pybroker.common.log_limit import LogLimiter


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def limited(caplog: pytest.LogCaptureFixture) -> tuple[LogLimiter, ManualClock]:
    caplog.set_level(logging.INFO, logger="test.log_limit")
    clock = ManualClock()
    return LogLimiter(logging.getLogger("test.log_limit"), interval=10.0, clock=clock), clock


def test_a_flood_of_one_reason_writes_one_line_per_interval(limited, caplog) -> None:
    limiter, clock = limited
    written = sum(limiter.warning("bad-frame", "Closing connection from %s", f"peer-{n}") for n in range(50_000))
    assert written == 1
    assert [r.getMessage() for r in caplog.records] == ["Closing connection from peer-0"]


def test_the_next_line_after_the_interval_says_how_many_were_suppressed(limited, caplog) -> None:
    limiter, clock = limited
    for _ in range(5):
        limiter.warning("bad-frame", "bad frame")
    clock.now += 10.0
    assert limiter.warning("bad-frame", "bad frame")
    assert [r.getMessage() for r in caplog.records] == [
        "bad frame", "bad frame (4 similar lines suppressed since the previous one)"]


def test_reasons_are_limited_independently(limited, caplog) -> None:
    limiter, clock = limited
    for _ in range(3):
        limiter.warning("bad-frame", "frame")
        limiter.log(logging.ERROR, "unexpected", "boom")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, "frame"),
                                                                     (logging.ERROR, "boom")]


def test_disabled_level_neither_logs_nor_opens_a_window(limited, caplog) -> None:
    limiter, clock = limited
    assert not limiter.log(logging.DEBUG, "bad-frame", "hidden")
    assert limiter.warning("bad-frame", "shown")
    assert [r.getMessage() for r in caplog.records] == ["shown"]
