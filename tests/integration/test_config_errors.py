"""Every topic key with a bad value of each kind is refused on the wire with INVALID_CONFIG and a one-line message
naming the key, when a topic is created (CreateTopics) and when its configs are altered (IncrementalAlterConfigs);
a broker key altered on a running broker is refused naming the key too, and the CLI prints that one line.

The bad values come from the declarations (a topic key's type and its LogConfig validator, or the broker key that
provides its default), as tests/unit/common/test_config_errors.py does for the broker keys at start-up.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pybroker.client import AdminClient, KafkaClient, NewTopic, ResponseError
from pybroker.client.admin import BROKER_RESOURCE, TOPIC_RESOURCE
from pybroker.protocol.error_codes import ErrorCode
from pybroker.server.topic_configs import topic_keys
from tests.integration.broker_process import REPO, BrokerProcess
from tests.unit.common.test_config_errors import refused_values

CASES = [(key.name, value) for key in topic_keys() for value in refused_values(key.type, key.validator)]


def test_every_topic_key_has_bad_values() -> None:
    assert sorted({key.name for key in topic_keys()} - {name for name, _ in CASES}) == []


async def refusals(bootstrap: str) -> dict[tuple[str, str, str], ResponseError | None]:
    """(operation, key, value) -> the broker's error, for every case, over one connection."""
    found: dict[tuple[str, str, str], ResponseError | None] = {}
    async with KafkaClient(bootstrap, client_id="config-errors") as client:
        admin = AdminClient(client)
        (await admin.create_topics([NewTopic("altered", 1, 1)]))["altered"].raise_error()
        for index, (name, value) in enumerate(CASES):
            topic = f"created-{index}"
            result = (await admin.create_topics([NewTopic(topic, 1, 1, configs={name: value})]))[topic]
            found[("create", name, value)] = result.error
            try:
                await admin.incremental_alter_configs(TOPIC_RESOURCE, "altered", set_configs={name: value},
                                                      delete_configs=[])
                found[("alter", name, value)] = None
            except ResponseError as exc:
                found[("alter", name, value)] = exc
    return found


def test_bad_topic_values_are_refused_naming_the_key(shared_broker: BrokerProcess) -> None:
    from pybroker.testing.embedded import run_sync

    found = run_sync(lambda: refusals(shared_broker.bootstrap))
    wrong = {}
    for (operation, name, value), error in found.items():
        if error is None or error.code != ErrorCode.INVALID_CONFIG or name not in str(error) or "\n" in str(error):
            wrong[f"{operation} {name}={value}"] = repr(error)
    assert wrong == {}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_the_cli_prints_the_refusal_as_one_line(shared_broker: BrokerProcess) -> None:
    created = cli("topics", "--bootstrap-server", shared_broker.bootstrap, "--create", "--topic", "cli-bad",
                  "--config", "retention.ms=-5")
    assert created.returncode == 1
    assert created.stderr.splitlines() == [
        "Error while executing topic command : Invalid value -5 for configuration retention.ms: "
        "Value must be at least -1"], created.stderr
    altered = cli("configs", "--bootstrap-server", shared_broker.bootstrap, "--alter", "--entity-type", "brokers",
                  "--entity-name", "0", "--add-config", "log.retention.ms=soon")
    assert altered.returncode == 1
    [line] = altered.stderr.splitlines()
    assert "log.retention.ms" in line, line


def test_a_broker_key_altered_at_runtime_is_refused_naming_it(shared_broker: BrokerProcess) -> None:
    async def alter(name: str, value: str) -> ResponseError:
        async with KafkaClient(shared_broker.bootstrap, client_id="config-errors") as client:
            with pytest.raises(ResponseError) as refused:
                await AdminClient(client).incremental_alter_configs(BROKER_RESOURCE, "0", set_configs={name: value},
                                                                    delete_configs=[])
        return refused.value

    from pybroker.testing.embedded import run_sync

    for name, value in (("log.retention.ms", "soon"), ("num.partitions", "0"), ("log.cleaner.threads", "-1")):
        error = run_sync(lambda: alter(name, value))
        assert name in str(error) and "\n" not in str(error), error
