"""Share groups' own configs (GROUP config resources, Kafka 4.2's GroupConfig share keys) and the broker's
``group.share.*`` settings that default and bound them.

Set with IncrementalAlterConfigs on a GROUP resource and read with DescribeConfigs, as ``kafka-configs.sh
--entity-type groups`` does. They are held in memory on this broker (Kafka keeps them in the metadata log): a
restart forgets them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Mapping

from pybroker.common.config import BrokerConfig
from pybroker.coordinator.share.group import ShareGroupSettings

__all__ = ["GroupConfigError", "ShareConfigs", "ShareLimits", "parse_reset"]

AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
LOCK_DURATION = "share.record.lock.duration.ms"
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


class GroupConfigError(ValueError):
    """A group config Kafka would refuse (INVALID_CONFIG), with Kafka's message."""


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """The broker's ``group.share.*`` keys."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000
    record_lock_duration_ms: int = 30_000
    min_record_lock_duration_ms: int = 15_000
    max_record_lock_duration_ms: int = 60_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000
    max_size: int = 200
    max_share_sessions: int = 2_000

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ShareLimits:
        return cls(**{f.name: config["group.share." + f.name.replace("_", ".")] for f in fields(cls)})

    def defaults(self) -> dict[str, str]:
        return {AUTO_OFFSET_RESET: "latest", ISOLATION_LEVEL: "read_uncommitted",
                LOCK_DURATION: str(self.record_lock_duration_ms), SESSION_TIMEOUT: str(self.session_timeout_ms),
                HEARTBEAT_INTERVAL: str(self.heartbeat_interval_ms)}


def parse_reset(value: str) -> tuple[str, int]:
    """("earliest" | "latest", 0) or ("by_duration", milliseconds); GroupConfigError for anything else."""
    if value in ("earliest", "latest"):
        return value, 0
    if value.startswith("by_duration:"):
        text = value[len("by_duration:"):]
        match = _DURATION.fullmatch(text)
        if match and text not in ("P", "PT") and not text.endswith("T"):
            days, hours, minutes, seconds = (float(part) if part else 0.0 for part in match.groups())
            return "by_duration", round((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)
    raise GroupConfigError(f"Invalid value `{value}` for configuration {AUTO_OFFSET_RESET}: should be one of "
                           "[latest, earliest, by_duration:PnDTnHnMn.nS]")


class ShareConfigs:
    """Each share group's overrides over the broker's defaults."""

    def __init__(self, limits: ShareLimits) -> None:
        self.limits = limits
        self._overrides: dict[str, dict[str, str]] = {}

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._overrides.get(group_id, {}))

    def value(self, group_id: str, key: str) -> str:
        return self._overrides.get(group_id, {}).get(key) or self.limits.defaults()[key]

    def settings(self, group_id: str) -> ShareGroupSettings:
        return ShareGroupSettings(int(self.value(group_id, SESSION_TIMEOUT)),
                                  int(self.value(group_id, HEARTBEAT_INTERVAL)), self.limits.max_size)

    def lock_duration_ms(self, group_id: str) -> int:
        return int(self.value(group_id, LOCK_DURATION))

    def read_committed(self, group_id: str) -> bool:
        return self.value(group_id, ISOLATION_LEVEL) == "read_committed"

    def auto_offset_reset(self, group_id: str) -> tuple[str, int]:
        return parse_reset(self.value(group_id, AUTO_OFFSET_RESET))

    def check(self, key: str, value: str | None) -> None:
        """Refuse what Kafka's GroupConfig.validate refuses."""
        if key not in self.limits.defaults():
            raise GroupConfigError(f"Unknown group config name: {key}")
        if value is None:
            return
        if key == AUTO_OFFSET_RESET:
            parse_reset(value)
            return
        if key == ISOLATION_LEVEL:
            if value not in ("read_committed", "read_uncommitted"):
                raise GroupConfigError(f"Invalid value {value} for configuration {key}: String must be one of: "
                                       "read_committed, read_uncommitted")
            return
        try:
            number = int(value)
        except ValueError:
            raise GroupConfigError(f"Invalid value {value} for configuration {key}: Not a number of type INT") from None
        low, high, low_key, high_key = self._bounds(key)
        if number < low:
            raise GroupConfigError(f"{key} must be greater than or equal to {low_key}")
        if number > high:
            raise GroupConfigError(f"{key} must be less than or equal to {high_key}")

    def alter(self, group_id: str, changes: Mapping[str, str | None]) -> None:
        """Apply checked changes (None deletes an override)."""
        current = self._overrides.setdefault(group_id, {})
        for key, value in changes.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        if not current:
            del self._overrides[group_id]

    def forget(self, group_id: str) -> None:
        self._overrides.pop(group_id, None)

    def _bounds(self, key: str) -> tuple[int, int, str, str]:
        limits = self.limits
        if key == LOCK_DURATION:
            return (limits.min_record_lock_duration_ms, limits.max_record_lock_duration_ms,
                    "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms")
        if key == SESSION_TIMEOUT:
            return (limits.min_session_timeout_ms, limits.max_session_timeout_ms,
                    "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms")
        return (limits.min_heartbeat_interval_ms, limits.max_heartbeat_interval_ms,
                "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms")
