"""`pybroker schema-registry` against a broker's registry: register (with a reference), list, get, check,
config, mode and deletes, and the registry's refusals as one line with its error code and exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from pybroker.testing import EmbeddedBroker
from tests.integration.broker_process import REPO


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("cli-registry"), schema_registry=True) as broker:
        yield broker.schema_registry_url


def cli(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", "schema-registry", "--url", url, *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO, input=stdin)


def test_the_common_tasks(url: str, tmp_path: Path) -> None:
    address = tmp_path / "address.avsc"
    address.write_text(json.dumps({"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}))
    user = {"type": "record", "name": "User", "fields": [{"name": "home", "type": "Address"}]}
    first = cli(url, "register", "address", "--schema-file", str(address))
    assert first.returncode == 0 and first.stdout.strip().isdigit()
    second = cli(url, "register", "user-value", "--schema-file", "-", "--reference", "Address=address:1",
                 stdin=json.dumps(user))
    assert second.returncode == 0, second.stderr
    assert cli(url, "subjects").stdout.split() == ["address", "user-value"]
    assert cli(url, "versions", "user-value").stdout.split() == ["1"]
    assert json.loads(cli(url, "get", "user-value").stdout) == user
    assert json.loads(cli(url, "get", "--id", first.stdout.strip()).stdout)["name"] == "Address"
    assert cli(url, "config", "user-value", "--set", "FULL").stdout.strip() == "FULL"
    assert cli(url, "config", "user-value").stdout.strip() == "FULL"
    assert cli(url, "config").stdout.strip() == "BACKWARD"
    evolved = tmp_path / "evolved.avsc"
    evolved.write_text(json.dumps({**user, "fields": user["fields"] + [{"name": "age", "type": "int"}]}))
    check = cli(url, "check", "user-value", "--schema-file", str(evolved), "--reference", "Address=address:1")
    assert check.returncode == 1 and check.stdout.startswith("incompatible") and "READER_FIELD" in check.stdout
    assert cli(url, "mode", "address", "--set", "READONLY").stdout.strip() == "READONLY"
    assert cli(url, "mode", "address").stdout.strip() == "READONLY"


def test_refusals_are_one_line_with_the_error_code(url: str) -> None:
    missing = cli(url, "versions", "nobody")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip() == "Error: Subject 'nobody' not found. (error code 40401)"
    bad_level = cli(url, "config", "--set", "SIDEWAYS")
    assert bad_level.returncode == 1 and "(error code 42203)" in bad_level.stderr
    unreachable = cli("http://127.0.0.1:1", "subjects")
    assert unreachable.returncode == 1 and "cannot be reached" in unreachable.stderr
    usage = cli(url, "register", "s", "--schema-file", "-", "--reference", "broken", stdin='"int"')
    assert usage.returncode == 1 and "NAME=SUBJECT:VERSION" in usage.stderr
