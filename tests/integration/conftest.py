from __future__ import annotations

import pytest

from tests.integration.wheel_venv import WheelVenv, wheel_venv


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    """The wheel built from this tree, installed into a fresh venv with its declared dependencies only."""
    return wheel_venv(tmp_path_factory.getbasetemp())
