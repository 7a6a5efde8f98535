"""README.md's "Schema registry" section, run as written: its curl commands against a broker's registry
(the quick start's 127.0.0.1:8081 replaced by the test broker's URL) and its pytest example as a test
file of its own, through the pytest plugin."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from pybroker.testing import EmbeddedBroker
from tests.integration.doc_blocks import readme_section, run_as_pytest_file

QUICK_START_URL = "http://127.0.0.1:8081"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", readme_section("Schema registry"), re.S)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("readme-registry"), schema_registry=True) as embedded:
        yield embedded


def test_the_curl_commands(broker: EmbeddedBroker) -> None:
    if shutil.which("curl") is None:
        pytest.fail("curl is missing: tools/install-system-deps.sh installs it")
    (commands,) = blocks("sh")
    assert QUICK_START_URL in commands
    script = commands.replace(QUICK_START_URL, broker.schema_registry_url)
    outputs = []
    for command in re.split(r"(?<!\\)\n", script.strip()):
        done = subprocess.run(["bash", "-ec", command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout))
    registered, latest, config = outputs
    assert registered["id"] == latest["id"] and latest["subject"] == "greetings-value" and latest["version"] == 1
    assert config == {"compatibility": "FULL"}


def test_the_pytest_example(tmp_path: Path) -> None:
    (example,) = blocks("python")
    run_as_pytest_file(example, tmp_path, "readme_example")
