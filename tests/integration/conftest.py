from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.wheel_venv import WheelVenv, wheel_venv


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


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    """The wheel built from this tree, installed into a fresh venv with its declared dependencies only."""
    return wheel_venv(tmp_path_factory.getbasetemp())
