"""The Kafka source and sink options, with the names, defaults and checks of Spark's connector.

Spark's `kafka` format takes its options case-insensitively; `kafka.*` options go to the Kafka client with
the prefix removed. Keys that would break the source's offset bookkeeping are refused, as Spark does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

FALLBACK_NAME = "pybroker-kafka"
EARLIEST = -2  # the per-partition JSON sentinels of startingOffsets/endingOffsets
LATEST = -1
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default: spark.network.timeout

STRATEGIES = ("subscribe", "subscribepattern", "assign")
# Options of Spark's connector the fallback does not implement yet; refused rather than silently ignored.
NOT_SUPPORTED_YET = ("minoffsetspertrigger", "maxtriggerdelay", "maxrecordsperpartition")
UNSUPPORTED_CLIENT_KEYS = {
    "auto.offset.reset": "Instead set the source option 'startingoffsets' to 'earliest' or 'latest' to specify "
                         "where to start.",
    "key.deserializer": "Keys are always read as bytes; use DataFrame operations to deserialize them.",
    "value.deserializer": "Values are always read as bytes; use DataFrame operations to deserialize them.",
    "enable.auto.commit": "The source does not commit any offsets to Kafka; it keeps them in the checkpoint.",
    "interceptor.classes": "The source reads raw bytes, so interceptors could break the query.",
}
UNSUPPORTED_PRODUCER_KEYS = {
    "key.serializer": "Keys are written as bytes; use DataFrame operations to serialize them to a string or binary.",
    "value.serializer": "Values are written as bytes; use DataFrame operations to serialize them to a string or "
                        "binary.",
}


class KafkaPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True)
class Subscription:
    """Which partitions the source reads: a topic list, a topic pattern, or fixed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[KafkaPartition, ...] = ()

    def select(self, available: Mapping[str, int]) -> list[KafkaPartition]:
        """Partitions to read, given each existing topic's partition count."""
        if self.assigned:
            return [tp for tp in self.assigned if tp.partition < available.get(tp.topic, 0)]
        if self.pattern is not None:
            regex = re.compile(self.pattern)
            topics = sorted(t for t in available if regex.fullmatch(t))
        else:
            topics = [t for t in self.topics if t in available]
        return [KafkaPartition(t, p) for t in topics for p in range(available[t])]


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: 'earliest', 'latest', per-partition offsets, or timestamps."""

    kind: str  # earliest | latest | offsets | timestamp | timestamps
    offsets: dict[KafkaPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class SourceOptions:
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    client_config: dict[str, str]
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    timestamp_strategy_latest: bool = False  # startingOffsetsByTimestampStrategy=latest


@dataclass(frozen=True)
class SinkOptions:
    topic: str | None
    client_config: dict[str, str]


def source_options(raw: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check the reader options the way Spark's KafkaSourceProvider does; ValueError names the bad one."""
    options = {k.lower(): v for k, v in raw.items()}
    for key in NOT_SUPPORTED_YET:
        if key in options:
            raise ValueError(f"Option '{key}' is not supported yet by the {FALLBACK_NAME} source; use Spark's "
                             "connector (--packages) for it")
    client_config = _client_config(options, "consumer", UNSUPPORTED_CLIENT_KEYS)
    subscription = _subscription(options)
    starting = _offset_spec(options, "starting", default="latest" if streaming else "earliest")
    if streaming:
        if "endingoffsets" in options or "endingtimestamp" in options or "endingoffsetsbytimestamp" in options:
            raise ValueError("Ending offset not valid in streaming queries")
        ending = OffsetSpec("latest")
    else:
        ending = _offset_spec(options, "ending", default="latest")
        _check_batch_bounds(starting, ending)
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ValueError(f"Invalid value '{strategy}' for option 'startingOffsetsByTimestampStrategy', "
                         "must be 'error' or 'latest'")
    return SourceOptions(
        subscription=subscription, starting=starting, ending=ending, client_config=client_config,
        max_offsets_per_trigger=_positive_int(options, "maxoffsetspertrigger"),
        min_partitions=_positive_int(options, "minpartitions"),
        fail_on_data_loss=_bool(options, "failondataloss", True),
        include_headers=_bool(options, "includeheaders", False),
        poll_timeout_ms=_positive_int(options, "kafkaconsumer.polltimeoutms") or DEFAULT_POLL_TIMEOUT_MS,
        timestamp_strategy_latest=strategy == "latest")


def sink_options(raw: Mapping[str, str]) -> SinkOptions:
    options = {k.lower(): v for k, v in raw.items()}
    return SinkOptions(topic=options.get("topic"),
                       client_config=_client_config(options, "producer", UNSUPPORTED_PRODUCER_KEYS))


def offsets_to_json(offsets: Mapping[KafkaPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's offset JSON: {"topic": {"0": 23, "1": 7}}; the checkpoint stores it as is."""
    result: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return result


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[KafkaPartition, int]:
    return {KafkaPartition(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}


def _client_config(options: Mapping[str, str], role: str, unsupported: Mapping[str, str]) -> dict[str, str]:
    config = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    if not config.get("bootstrap.servers"):
        raise ValueError(f"Option 'kafka.bootstrap.servers' must be specified for configuring Kafka {role}")
    for key, why in unsupported.items():
        if key in config:
            raise ValueError(f"Kafka option '{key}' is not supported. {why}")
    return config


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [s for s in STRATEGIES if s in options]
    if not given:
        raise ValueError("One of the following options must be specified for Kafka source: subscribe, "
                         "subscribePattern, assign. See the docs for more details.")
    if len(given) > 1:
        raise ValueError("Only one of the following options can be specified for Kafka source: subscribe, "
                         "subscribePattern, assign. See the docs for more details.")
    value = options[given[0]]
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Subscription(topics=topics)
    if given[0] == "subscribepattern":
        if not value.strip():
            raise ValueError("Pattern to subscribe is empty as specified value for option 'subscribePattern' "
                             f"is '{value}'")
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"Invalid pattern for option 'subscribePattern': {exc}") from None
        return Subscription(pattern=value.strip())
    parsed = _json(value, "assign")
    if not isinstance(parsed, dict) or not all(isinstance(v, list) for v in parsed.values()):
        raise ValueError(f"""Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {value}""")
    return Subscription(assigned=tuple(KafkaPartition(t, int(p)) for t, ps in parsed.items() for p in ps))


def _offset_spec(options: Mapping[str, str], which: str, *, default: str) -> OffsetSpec:
    """endingTimestamp > endingOffsetsByTimestamp > endingOffsets, and likewise for starting, as in Spark."""
    if f"{which}timestamp" in options:
        return OffsetSpec("timestamp", timestamp=_int(options[f"{which}timestamp"], f"{which}Timestamp"))
    if f"{which}offsetsbytimestamp" in options:
        name = f"{which}OffsetsByTimestamp"
        return OffsetSpec("timestamps", offsets=_partition_json(options[f"{which}offsetsbytimestamp"], name))
    value = options.get(f"{which}offsets", default).strip()
    if value.lower() in ("earliest", "latest"):
        return OffsetSpec(value.lower())
    return OffsetSpec("offsets", offsets=_partition_json(value, f"{which}Offsets"))


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    if starting.kind == "latest":
        raise ValueError("starting offset can't be latest for batch queries on Kafka")
    if ending.kind == "earliest":
        raise ValueError("ending offset can't be earliest for batch queries on Kafka")
    for tp, offset in starting.offsets.items() if starting.kind == "offsets" else ():
        if offset == LATEST:
            raise ValueError(f"startingOffsets for {tp.topic}-{tp.partition} can't be latest for batch queries "
                             "on Kafka")
    for tp, offset in ending.offsets.items() if ending.kind == "offsets" else ():
        if offset == EARLIEST:
            raise ValueError(f"endingOffsets for {tp.topic}-{tp.partition} can't be earliest for batch queries "
                             "on Kafka")


def _partition_json(value: str, name: str) -> dict[KafkaPartition, int]:
    parsed = _json(value, name)
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ValueError(f"""Expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, got {value}""")
    return {KafkaPartition(topic, _int(p, name)): _int(o, name) for topic, parts in parsed.items()
            for p, o in parts.items()}


def _json(value: str, name: str) -> object:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise ValueError(f"Option '{name}' is not valid JSON: {value}") from None


def _int(value: object, name: str) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"Option '{name}' must be a number, got {value!r}") from None


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    if key not in options:
        return None
    number = _int(options[key], key)
    if number <= 0:
        raise ValueError(f"Invalid value '{options[key]}' for option '{key}', must be a positive integer")
    return number


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"Invalid value '{options[key]}' for option '{key}', must be true or false")
    return value == "true"
