"""The brokers every test directory may take: one per test, or one per module."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.broker_process import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path).start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole module of tests that use distinct topics."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield process
    process.kill()
