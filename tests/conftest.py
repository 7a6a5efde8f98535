"""The brokers every test directory may take: one per test, or one per module; and how `make test`'s workers
share the files out."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.integration.broker_process import BrokerProcess

#: Directories whose files share package-scoped fixtures that cost tens of seconds to set up (tests/spark: a local
#: Spark, a Spark 4.0 process, a broker and 100,000 generated events). Under `--dist loadfile` each is one unit of
#: work, so one worker sets them up once; shared out file by file, every worker that ran one of its files started
#: them, and again each time it came back to the directory after another file (pytest tears a package's fixtures
#: down when the next test is outside it).
ONE_UNIT = ("tests/spark/",)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((unit for unit in ONE_UNIT if nodeid.startswith(unit)), super()._split_scope(nodeid))

    return Scheduling(config, log)


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
