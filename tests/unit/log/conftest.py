"""Fixtures shared by the log tests; builders live in ``logtest_util``."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _log_debug(caplog: pytest.LogCaptureFixture) -> None:
    """Capture the pybroker.log logger so recovery tests can assert on what was logged."""
    caplog.set_level(logging.INFO, logger="pybroker.log")
