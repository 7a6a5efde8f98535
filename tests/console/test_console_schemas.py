"""The console's schema registry pages in headless chromium: subjects with versions, ids, types and
compatibility, and a subject's versions with their schemas and references."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Iterator

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient, ServerConfig
from confluent_kafka.schema_registry.common.schema_registry_client import ConfigCompatibilityLevel

from tests.console.conftest import ConsoleProcess
from tests.integration.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    process = BrokerProcess(tmp_path_factory.mktemp("console-registry"),
                            {"schema.registry.listeners": "http://127.0.0.1:0"}).start()
    url = re.search(r"Schema registry listening on (\S+)", process.log_text())
    assert url is not None
    client = SchemaRegistryClient({"url": url.group(1)})
    address = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    client.register_schema("address", Schema(json.dumps(address), "AVRO"))
    user = {"type": "record", "name": "User", "fields": [{"name": "home", "type": "Address"}]}
    client.register_schema("users-value", Schema(json.dumps(user), "AVRO", [SchemaReference("Address", "address", 1)]))
    client.register_schema("events-value", Schema('{"type": "object"}', "JSON"))
    client.set_config("users-value", ServerConfig(compatibility=ConfigCompatibilityLevel.FULL))
    yield process, url.group(1)
    process.kill()


def test_subjects_and_versions(registry_broker: tuple[BrokerProcess, str], start_console: Callable[..., ConsoleProcess],
                               browser: object, screenshots: Path) -> None:
    process, url = registry_broker
    console = start_console("--bootstrap-server", process.bootstrap, "--schema-registry-url", url).wait_ready()
    page = browser.new_page()  # type: ignore[attr-defined]
    try:
        page.goto(f"{console.url}/")
        page.click("text=Schemas")
        assert page.inner_text("#global-level") == "BACKWARD"
        rows = [row.split("\t") for row in page.inner_text("#subjects").splitlines()[1:]]
        assert [(r[0], r[1], r[4], r[5]) for r in rows] == [
            ("address", "1", "AVRO", "BACKWARD"), ("events-value", "1", "JSON", "BACKWARD"),
            ("users-value", "1", "AVRO", "FULL")]
        page.screenshot(path=str(screenshots / "schemas.png"))
        page.click("text=users-value")
        assert page.inner_text("#subject-level") == "FULL"
        versions = page.inner_text("#versions")
        assert "Address (address v1)" in versions and '"name": "home"' in versions
        page.screenshot(path=str(screenshots / "schema-subject.png"))
    finally:
        page.close()


def test_without_a_registry_the_page_says_how_to_add_one(console_broker: BrokerProcess,
                                                         start_console: Callable[..., ConsoleProcess],
                                                         browser: object) -> None:
    console = start_console("--bootstrap-server", console_broker.bootstrap).wait_ready()
    page = browser.new_page()  # type: ignore[attr-defined]
    try:
        page.goto(f"{console.url}/schemas")
        assert "--schema-registry-url" in page.inner_text("main")
    finally:
        page.close()
