"""Per-log configuration with Kafka's topic-config names and semantics.

``LogConfig`` is what every ``PartitionLog`` reads; ``LogConfig.from_topic_configs`` applies the
string overrides a topic carries (``/config/topics/<topic>`` or CreateTopics configs) on top of a
base config (the broker's defaults). ``TOPIC_CONFIG_KEYS`` is the one table of the keys the log
understands, so DescribeConfigs can list names, types, defaults and docs from it.
Keys the log does not use (``min.insync.replicas``, ``compression.type``...) are ignored here;
the server validates those against its own table.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from pybroker.common.config import AtLeast, Between, OneOf
from pybroker.log.errors import InvalidLogConfig
from pybroker.records.validation import ProducePolicy, max_decompressed_bytes

__all__ = ["LogConfig", "TopicConfigKey", "TOPIC_CONFIG_KEYS", "InvalidLogConfig"]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class TopicConfigKey(NamedTuple):
    """One topic config key: the LogConfig field it sets, Kafka type name, default and doc."""

    field: str
    type: str  # Kafka ConfigDef type name: "int", "long", "double", "boolean", "string", "list"
    default: Any
    doc: str


TOPIC_CONFIG_KEYS: dict[str, TopicConfigKey] = {
    "segment.bytes": TopicConfigKey(
        "segment_bytes", "int", 1073741824, "Segment file size at which the log rolls a new segment."),
    "segment.ms": TopicConfigKey(
        "segment_ms", "long", 604800000, "Time after which the log rolls even if the segment is not full."),
    "segment.index.bytes": TopicConfigKey(
        "segment_index_bytes", "int", 10485760, "Preallocated size of the offset and time index files."),
    "index.interval.bytes": TopicConfigKey(
        "index_interval_bytes", "int", 4096, "Bytes appended between two offset-index entries."),
    "retention.ms": TopicConfigKey(
        "retention_ms", "long", 604800000, "Age after which a segment is deleted; -1 = unlimited."),
    "retention.bytes": TopicConfigKey(
        "retention_bytes", "long", -1, "Partition size above which old segments are deleted; -1 = unlimited."),
    "flush.messages": TopicConfigKey(
        "flush_messages", "long", LONG_MAX, "Messages appended before the log is fsynced."),
    "flush.ms": TopicConfigKey(
        "flush_ms", "long", LONG_MAX, "Time after which unflushed data is fsynced."),
    "max.message.bytes": TopicConfigKey(
        "max_message_bytes", "int", 1048588, "Largest record batch the log accepts."),
    "message.timestamp.type": TopicConfigKey(
        "message_timestamp_type", "string", "CreateTime", "CreateTime or LogAppendTime."),
    "message.timestamp.before.max.ms": TopicConfigKey(
        "message_timestamp_before_max_ms", "long", LONG_MAX,
        "How far a CreateTime record's timestamp may lie before the broker's clock (Kafka 3.6+, KIP-937)."),
    "message.timestamp.after.max.ms": TopicConfigKey(
        "message_timestamp_after_max_ms", "long", LONG_MAX,
        "How far a CreateTime record's timestamp may lie after the broker's clock (Kafka 3.6+, KIP-937)."),
    "message.timestamp.difference.max.ms": TopicConfigKey(
        "message_timestamp_difference_max_ms", "long", LONG_MAX,
        "Deprecated: the before/after bound where those keep their default."),
    "cleanup.policy": TopicConfigKey(
        "cleanup_policy", "list", "delete", "Comma-separated 'delete' and/or 'compact'."),
    "file.delete.delay.ms": TopicConfigKey(
        "file_delete_delay_ms", "long", 60000, "Delay between renaming a deleted segment to .deleted and removing it."),
    "delete.retention.ms": TopicConfigKey(
        "delete_retention_ms", "long", 86400000,
        "How long tombstones stay in a compacted log after the cleaner first saw them."),
    "min.cleanable.dirty.ratio": TopicConfigKey(
        "min_cleanable_dirty_ratio", "double", 0.5,
        "Dirty bytes / total bytes above which the cleaner compacts the log."),
    "min.compaction.lag.ms": TopicConfigKey(
        "min_compaction_lag_ms", "long", 0, "Minimum age of a record before it may be compacted."),
    "max.compaction.lag.ms": TopicConfigKey(
        "max_compaction_lag_ms", "long", LONG_MAX,
        "Maximum age of an uncompacted record; older ones make the log eligible regardless of the ratio."),
    "preallocate": TopicConfigKey(
        "preallocate", "boolean", False, "Preallocate segment files (accepted; pybroker does not preallocate)."),
}

_FIELD_TO_KEY = {spec.field: key for key, spec in TOPIC_CONFIG_KEYS.items()}


# Kafka's LogConfig validators (ConfigDef.Range.atLeast / ValidString / ValidList), per LogConfig field.
FIELD_VALIDATORS: dict[str, AtLeast | Between | OneOf] = {
    "segment_bytes": AtLeast(14),  # LegacyRecord.RECORD_OVERHEAD_V0
    "segment_ms": AtLeast(1),
    "segment_index_bytes": AtLeast(4),
    "index_interval_bytes": AtLeast(0),
    "retention_ms": AtLeast(-1),
    "flush_messages": AtLeast(1),
    "flush_ms": AtLeast(0),
    "max_message_bytes": AtLeast(0),
    "file_delete_delay_ms": AtLeast(0),
    "delete_retention_ms": AtLeast(0),
    "min_cleanable_dirty_ratio": Between(0, 1),
    "min_compaction_lag_ms": AtLeast(0),
    "max_compaction_lag_ms": AtLeast(1),
    "message_timestamp_type": OneOf(("CreateTime", "LogAppendTime")),
    "message_timestamp_before_max_ms": AtLeast(0),
    "message_timestamp_after_max_ms": AtLeast(0),
    "message_timestamp_difference_max_ms": AtLeast(0),
    "cleanup_policy": OneOf(("compact", "delete"), listed=True),  # empty is valid: Kafka's ValidList
}


def _convert(key: str, spec: TopicConfigKey, raw: str) -> Any:
    """Convert one override string to the field's Python type, or raise naming the key."""
    text = str(raw).strip()
    if spec.type in ("int", "long"):
        try:
            value = int(text)
        except ValueError:
            raise InvalidLogConfig(key, raw, "Expected value to be a 32-bit integer" if spec.type == "int"
                                   else "Expected value to be a 64-bit integer") from None
        limit = INT_MAX if spec.type == "int" else LONG_MAX
        if not -limit - 1 <= value <= limit:
            raise InvalidLogConfig(key, raw, f"Value out of range for type {spec.type}")
        return value
    if spec.type == "double":
        try:
            return float(text)
        except ValueError:
            raise InvalidLogConfig(key, raw, "Expected value to be a double") from None
    if spec.type == "boolean":
        if text.lower() not in ("true", "false"):
            raise InvalidLogConfig(key, raw, "Expected value to be either true or false")
        return text.lower() == "true"
    if spec.type == "list":
        return ",".join(p.strip() for p in text.split(",") if p.strip())
    return text


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log; field names are Kafka's topic keys in snake_case. The settings derived
    from them are cached properties (the config is frozen), since every append asks for some."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    file_delete_delay_ms: int = 60000
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    preallocate: bool = False

    def __post_init__(self) -> None:
        for name, validator in FIELD_VALIDATORS.items():
            reason = validator.reason(getattr(self, name))
            if reason is not None:
                raise InvalidLogConfig(_FIELD_TO_KEY[name], getattr(self, name), reason)
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidLogConfig("min.compaction.lag.ms", self.min_compaction_lag_ms,
                                   f"conflicts with max.compaction.lag.ms {self.max_compaction_lag_ms}: "
                                   "the minimum lag must not exceed the maximum")

    @classmethod
    def from_topic_configs(cls, base: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
        """``base`` with every known Kafka topic key in ``overrides`` applied (unknown keys ignored)."""
        changes: dict[str, Any] = {}
        for key, raw in overrides.items():
            spec = TOPIC_CONFIG_KEYS.get(key)
            if spec is None or raw is None:
                continue
            changes[spec.field] = _convert(key, spec, raw)
        return dataclasses.replace(base, **changes)

    def to_topic_configs(self) -> dict[str, str]:
        """Every key as the string Kafka would show in DescribeConfigs."""
        out: dict[str, str] = {}
        for key, spec in TOPIC_CONFIG_KEYS.items():
            value = getattr(self, spec.field)
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    @functools.cached_property
    def produce_policy(self) -> ProducePolicy:
        """What LogValidator checks in a produced batch under these settings, built once per config."""
        return ProducePolicy(compacted=self.compact_enabled, log_append_time=self.log_append_time,
                             timestamp_before_max_ms=self.timestamp_before_max_ms,
                             timestamp_after_max_ms=self.timestamp_after_max_ms,
                             max_decompressed_bytes=max_decompressed_bytes(self.max_message_bytes))

    @functools.cached_property
    def log_append_time(self) -> bool:
        """True when the broker stamps its own clock into every appended batch."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """Kafka 3.x LogConfig: message.timestamp.before.max.ms, or the deprecated difference key where
        the before key keeps its default."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """As timestamp_before_max_ms, for timestamps ahead of the broker's clock."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @functools.cached_property
    def delete_enabled(self) -> bool:
        """True when time/size retention applies ("delete" is in cleanup.policy)."""
        return "delete" in self.cleanup_policy.split(",")

    @functools.cached_property
    def compact_enabled(self) -> bool:
        """True when "compact" is in cleanup.policy: the log cleaner keeps the latest record per key."""
        return "compact" in self.cleanup_policy.split(",")

    @functools.cached_property
    def max_segment_ms(self) -> int:
        """segment.ms, capped by max.compaction.lag.ms on compacted logs (Kafka ``maxSegmentMs``).

        The active segment is never cleaned, so it must roll in time for its oldest record to
        be compacted within max.compaction.lag.ms.
        """
        if self.compact_enabled and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms
