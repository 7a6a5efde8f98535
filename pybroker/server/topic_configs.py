"""Topic configs: broker-level defaults, per-topic overrides, validation and description.

A topic config's effective value is its override when the topic has one, else the broker key that
provides its default (e.g. `retention.ms` <- `log.retention.ms`/`minutes`/`hours`), as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pybroker.common.config import (
    CONFIG_KEYS,
    BrokerConfig,
    ConfigError,
    ConfigKey,
    key_synonyms,
    parse_value,
    value_text,
)
from pybroker.log.config import FIELD_VALIDATORS, TOPIC_CONFIG_KEYS, InvalidLogConfig, LogConfig
from pybroker.schema_registry import validation as schema_validation

# DescribeConfigs ConfigSource values.
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# DescribeConfigs ConfigType values (v3+).
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
                "class": 8, "password": 9}

_BROKER_KEY_FOR_TOPIC_KEY = {key.topic_key: key for key in CONFIG_KEYS.values() if key.topic_key}


@dataclass(frozen=True, slots=True)
class Synonym:
    """One place a config's value may come from, as DescribeConfigs lists it (include_synonyms)."""

    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    name: str
    value: str | None
    source: int
    config_type: int
    doc: str
    synonyms: tuple[Synonym, ...] = ()
    read_only: bool = False
    is_sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT_CONFIG


def broker_synonyms(config: BrokerConfig, name: str) -> tuple[Synonym, ...]:
    """Kafka's ConfigHelper.configSynonyms for a static broker: the keys of `name`'s synonym group set
    in the properties file, then their non-null defaults, less those before the first entry named
    `name` (so `log.retention.hours` is not listed under `log.retention.ms` unless that is set)."""
    names = key_synonyms(name)
    listed = [Synonym(n, config.raw[n], STATIC_BROKER_CONFIG) for n in names if config.is_set(n)]
    listed += [Synonym(n, value_text(CONFIG_KEYS[n].default), DEFAULT_CONFIG) for n in names
               if n in CONFIG_KEYS and CONFIG_KEYS[n].default is not None]  # Kafka keeps no null defaults
    first = next((i for i, synonym in enumerate(listed) if synonym.name == name), len(listed))
    return tuple(listed[first:])


@dataclass(frozen=True, slots=True)
class TopicKey:
    """A topic config key as declared: by the log (TOPIC_CONFIG_KEYS), the broker key giving its default, or both."""

    name: str
    type: str
    validator: Any
    doc: str
    broker_key: ConfigKey | None


def topic_keys() -> list[TopicKey]:
    """Every topic config key, sorted: type, validator and doc from the log's table, else the broker key's."""
    keys = []
    for name in sorted(set(TOPIC_CONFIG_KEYS) | set(_BROKER_KEY_FOR_TOPIC_KEY)):
        spec = TOPIC_CONFIG_KEYS.get(name)
        broker_key = _BROKER_KEY_FOR_TOPIC_KEY.get(name)
        validator = FIELD_VALIDATORS.get(spec.field) if spec is not None else None
        if spec is not None:
            keys.append(TopicKey(name, spec.type, validator or (broker_key.validator if broker_key else None),
                                 spec.doc, broker_key))
        elif broker_key is not None:
            keys.append(TopicKey(name, broker_key.type, broker_key.validator, broker_key.doc, broker_key))
    return keys


def broker_key_error(config: BrokerConfig, exc: InvalidLogConfig) -> str:
    """The message of a topic key's refusal of a broker default, naming the broker key the user set (its
    most specific synonym in the file, e.g. log.roll.ms over log.roll.hours) and the value written there."""
    broker_key = _BROKER_KEY_FOR_TOPIC_KEY[exc.key].name
    synonyms = key_synonyms(broker_key)
    written = next((name for name in synonyms if config.is_set(name)), broker_key)
    value = config.raw[written] if config.is_set(written) else exc.value
    return f"Invalid value {value} for configuration {written}: {exc.reason}"


class TopicConfigs:
    def __init__(self, broker_config: BrokerConfig):
        self._broker_config = broker_config
        self.defaults = {**broker_config.topic_defaults(),
                         **{name: key.default for name, key in schema_validation.TOPIC_KEYS.items()}}
        try:
            self._base = LogConfig.from_topic_configs(LogConfig(), self._log_keys(self.defaults))
        except InvalidLogConfig as exc:  # a broker default the topic key refuses: named as the user wrote it
            raise ConfigError(broker_key_error(broker_config, exc)) from None
        self.known_keys = sorted(set(TOPIC_CONFIG_KEYS) | set(self.defaults))

    def validate(self, overrides: Mapping[str, str | None]) -> None:
        """Raise ValueError naming the first unknown key or unusable value."""
        checked: dict[str, str] = {}
        for name, value in overrides.items():
            if name not in self.known_keys:
                raise ValueError(f"Unknown topic config name: {name}")
            if value is None:
                raise ValueError(f"Null value not supported for topic configs: {name}")
            broker_key = _BROKER_KEY_FOR_TOPIC_KEY.get(name)
            if name not in TOPIC_CONFIG_KEYS and broker_key is not None:  # the broker's type and bounds
                parse_value(name, broker_key, value)
            checked[name] = value
        self.log_config(checked)
        schema_validation.validate_configs(checked)

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_topic_configs(self._base, self._log_keys(overrides))

    def min_insync_replicas(self, overrides: Mapping[str, str]) -> int:
        raw = overrides.get("min.insync.replicas", self.defaults["min.insync.replicas"])
        return int(parse_value("min.insync.replicas", CONFIG_KEYS["min.insync.replicas"], raw))

    def describe(self, overrides: Mapping[str, str], keys: list[str] | None = None) -> list[DescribedConfig]:
        described = []
        for name in self.known_keys:
            if keys and name not in keys:  # Kafka: a null or empty key list asks for every key
                continue
            broker_key = _BROKER_KEY_FOR_TOPIC_KEY.get(name)
            synonyms = broker_synonyms(self._broker_config, broker_key.name) if broker_key else ()
            if name in overrides:
                value, source = overrides[name], DYNAMIC_TOPIC_CONFIG
                synonyms = (Synonym(name, value, DYNAMIC_TOPIC_CONFIG),) + synonyms
            elif name in self.defaults:
                value = self.defaults[name]
                source = synonyms[0].source if synonyms else DEFAULT_CONFIG
            else:
                value, source = _log_default(name), DEFAULT_CONFIG
            spec = broker_key or TOPIC_CONFIG_KEYS.get(name) or schema_validation.TOPIC_KEYS[name]
            config_type, doc = spec.type, spec.doc
            described.append(DescribedConfig(name, value, source, CONFIG_TYPES.get(config_type, 2), doc, synonyms))
        return described

    @staticmethod
    def _log_keys(values: Mapping[str, str]) -> dict[str, str]:
        return {name: value for name, value in values.items() if name in TOPIC_CONFIG_KEYS}


def _log_default(name: str) -> str:
    default = TOPIC_CONFIG_KEYS[name][2]
    if isinstance(default, bool):
        return "true" if default else "false"
    return str(default)
