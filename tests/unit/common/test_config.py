from pathlib import Path

import pytest

from pybroker.common.config import CONFIG_KEYS, BrokerConfig, ConfigError, parse_properties

REPO = Path(__file__).resolve().parents[3]


def test_sample_server_properties_only_uses_declared_keys():
    values = parse_properties((REPO / "config" / "server.properties").read_text())
    assert values, "the sample config should set something"
    assert sorted(k for k in values if k not in CONFIG_KEYS) == []
    config = BrokerConfig(values)
    assert config.listeners == [("PLAINTEXT", "127.0.0.1", 9092)]


def test_properties_syntax_comments_separators_and_continuations():
    text = "# comment\n! also comment\na=1\nb : two\nc three\nlong=first,\\\n   second\n"
    assert parse_properties(text) == {"a": "1", "b": "two", "c": "three", "long": "first,second"}


def test_kafka_defaults_and_precedence_of_retention_keys():
    config = BrokerConfig({})
    assert config["num.partitions"] == 1
    assert config["message.max.bytes"] == 1048588
    assert config.retention_ms == 168 * 3_600_000
    assert BrokerConfig({"log.retention.minutes": "5"}).retention_ms == 300_000
    assert BrokerConfig({"log.retention.minutes": "5", "log.retention.ms": "7"}).retention_ms == 7
    assert BrokerConfig({"log.dirs": "/a,/b"}).log_dirs == ["/a", "/b"]


@pytest.mark.parametrize("key,value,fragment", [
    ("num.partitions", "zero", "num.partitions"),
    ("num.partitions", "0", "at least 1"),
    ("auto.create.topics.enable", "maybe", "auto.create.topics.enable"),
    ("listeners", "localhost:9092", "listeners"),
    ("log.message.timestamp.type", "WallClock", "log.message.timestamp.type"),
])
def test_invalid_value_names_the_key(key, value, fragment):
    with pytest.raises(ConfigError) as info:
        BrokerConfig({key: value})
    assert fragment in str(info.value)


def test_overrides_win_over_the_file(tmp_path):
    path = tmp_path / "s.properties"
    path.write_text("num.partitions=3\n")
    config = BrokerConfig.load(str(path), ["num.partitions=5"])
    assert config["num.partitions"] == 5
    with pytest.raises(ConfigError):
        BrokerConfig.load(str(path), ["no-equals-sign"])


def test_unknown_keys_are_kept_and_reported():
    config = BrokerConfig({"some.plugin.setting": "x"})
    assert config.unknown == ["some.plugin.setting"]
