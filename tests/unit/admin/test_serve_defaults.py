"""`pybroker serve` without a config file, the shipped samples, the kafka-* script aliases, and which listeners
are exposed without authentication."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

import pybroker.__main__ as cli
from pybroker.admin import KAFKA_SCRIPTS, TOOLS
from pybroker.common.config import CONFIG_KEYS, BrokerConfig, parse_properties
from pybroker.samples import sample_names, sample_text
from pybroker.server.listeners import unauthenticated_exposure

REPO = Path(__file__).resolve().parents[3]


def test_without_a_file_the_broker_is_the_server_sample_on_loopback_with_data_in_the_user_data_dir(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    config, data = cli.development_config([])
    assert config.listeners == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert data == tmp_path / ".local" / "share" / "pybroker" / "kafka-logs"
    assert config["offsets.topic.replication.factor"] == 1 and config["group.initial.rebalance.delay.ms"] == 0
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert cli.development_config([])[1] == tmp_path / "xdg" / "pybroker" / "kafka-logs"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # the XDG spec says to ignore a relative one
    assert cli.development_config([])[1] == tmp_path / ".local" / "share" / "pybroker" / "kafka-logs"
    overridden, _ = cli.development_config(["listeners=PLAINTEXT://127.0.0.1:0"])
    assert overridden.listeners == [("PLAINTEXT", "127.0.0.1", 0)]


def test_every_sample_in_config_ships_in_the_package_and_uses_declared_keys() -> None:
    in_repo = sorted(path.stem for path in (REPO / "config").glob("*.properties"))
    assert sample_names() == in_repo
    for name in in_repo:
        assert sample_text(name) == (REPO / "config" / f"{name}.properties").read_text()
        if name not in ("zookeeper",) and not name.endswith("-client"):
            unknown = [key for key in parse_properties(sample_text(name))
                       if key not in CONFIG_KEYS and not key.startswith("listener.name.")]
            assert unknown == [], name


def test_sample_config_lists_prints_and_refuses_an_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sample-config"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == sample_names()
    assert cli.main(["sample-config", "server"]) == 0
    assert capsys.readouterr().out == sample_text("server")
    assert cli.main(["sample-config", "nope"]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("pybroker: no sample configuration named 'nope'") and captured.err.count("\n") == 1


def test_the_kafka_scripts_are_declared_and_run_their_subcommand(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert {name: target for name, target in scripts.items() if name != "pybroker"} == \
        {name: "pybroker.__main__:kafka_script" for name in KAFKA_SCRIPTS}
    assert set(KAFKA_SCRIPTS.values()) == (set(TOOLS) - {"console", "schema-registry"}) | {"serve"}
    monkeypatch.setattr(sys, "argv", ["/venv/bin/kafka-topics.sh", "--help"])
    with pytest.raises(SystemExit) as done:
        cli.kafka_script()
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: pybroker topics")
    monkeypatch.setattr(sys, "argv", ["/venv/bin/kafka-nonsense"])
    assert cli.kafka_script() == 1


@pytest.mark.parametrize(("settings", "exposed"), [
    ({"listeners": "PLAINTEXT://:9092"}, ["PLAINTEXT://:9092"]),
    ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, ["PLAINTEXT://0.0.0.0:9092"]),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092"}, []),
    ({"listeners": "PLAINTEXT://localhost:9092"}, []),
    ({"listeners": "PLAINTEXT://[::1]:9092"}, []),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://:9093"}, ["SSL://:9093"]),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://:9093", "ssl.client.auth": "required"}, []),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://:9093", "listener.name.ssl.ssl.client.auth": "required"}, []),
    ({"listeners": "SASL_SSL://:9094", "security.inter.broker.protocol": "SASL_SSL"}, []),
])
def test_listeners_open_to_the_network_without_authentication(settings: dict[str, str], exposed: list[str]) -> None:
    assert [e.uri() for e in unauthenticated_exposure(BrokerConfig(settings))] == exposed
