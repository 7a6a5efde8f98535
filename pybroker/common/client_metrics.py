"""Client-metrics subscriptions (KIP-714) as Kafka configures them: a named config entity of type
``client-metrics`` (ConfigResource type 16) with three keys (Kafka's ClientMetricsConfigs):

- ``metrics``: comma-separated metric-name prefixes the matched clients push; empty = none, ``*`` = all;
- ``interval.ms``: how often they push, 100 ms to one hour, five minutes by default;
- ``match``: comma-separated ``<selector>=<regex>`` patterns a client must all fully match, the
  selectors being client_instance_id, client_id, client_software_name, client_software_version,
  client_source_address and client_source_port; none matches every client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
CONFIG_KEYS = (METRICS, INTERVAL_MS, MATCH)
ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 5 * 60 * 1000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
SELECTORS = frozenset({"client_instance_id", "client_id", "client_software_name", "client_software_version",
                       "client_source_address", "client_source_port"})


class InvalidSubscription(ValueError):
    """A refused subscription config; ``invalid_config`` tells INVALID_CONFIG from INVALID_REQUEST, as Kafka's
    InvalidConfigurationException (bad match patterns) differs from its InvalidRequestException (the rest)."""

    def __init__(self, message: str, invalid_config: bool = False) -> None:
        super().__init__(message)
        self.invalid_config = invalid_config


def split_list(value: str | None) -> list[str]:
    """A Kafka LIST config value: comma-separated, items trimmed, empty items dropped."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def parse_patterns(patterns: list[str]) -> dict[str, re.Pattern[str]]:
    parsed: dict[str, re.Pattern[str]] = {}
    for pattern in patterns:
        parts = pattern.split("=")
        if len(parts) != 2 or parts[0].strip() not in SELECTORS:
            raise InvalidSubscription(f"Illegal client matching pattern: {pattern}", invalid_config=True)
        try:
            parsed[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise InvalidSubscription(f"Illegal client matching pattern: {pattern}", invalid_config=True) from None
    return parsed


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]] = field(default_factory=dict)

    def matches(self, client: Mapping[str, str]) -> bool:
        """Every pattern fully matches the client's value (Java's Matcher.matches)."""
        return all(pattern.fullmatch(client.get(selector, "")) is not None for selector, pattern in self.match.items())


def validate(name: str, config: Mapping[str, str]) -> None:
    """Kafka's ClientMetricsConfigs.validate: raises InvalidSubscription with Kafka's message."""
    if not name:
        raise InvalidSubscription("Subscription name can't be empty")
    for key in config:
        if key not in CONFIG_KEYS:
            raise InvalidSubscription(f"Unknown client metrics configuration: {key}")
    if INTERVAL_MS in config:
        try:
            interval = int(config[INTERVAL_MS])
        except ValueError:
            raise InvalidSubscription(f"Invalid value {config[INTERVAL_MS]} for configuration {INTERVAL_MS}: "
                                      "Not a number of type INT", invalid_config=True) from None
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise InvalidSubscription(f"Invalid value {interval} for {INTERVAL_MS}, interval must be between 100 "
                                      "and 3600000 (1 hour)")
    if MATCH in config:
        parse_patterns(split_list(config[MATCH]))


def subscription(name: str, config: Mapping[str, str]) -> Subscription:
    """A validated stored config as a subscription."""
    validate(name, config)
    return Subscription(name, tuple(split_list(config.get(METRICS))),
                        int(config.get(INTERVAL_MS, DEFAULT_INTERVAL_MS)), parse_patterns(split_list(config.get(MATCH))))
