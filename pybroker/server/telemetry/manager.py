"""Client telemetry (KIP-714) as Kafka's ClientMetricsManager answers it.

A client asks GetTelemetrySubscriptions (with a zero instance id the first time, and gets a fresh one),
learns which metric prefixes to push, how often, how large and compressed how; then pushes OTLP
MetricsData with PushTelemetry. Each client instance is matched against every subscription once, and again
after any subscription changes; its subscription id is a CRC32C of its requested metrics and push interval
XOR the instance id's hash, so a client pushing for an older set gets UNKNOWN_SUBSCRIPTION_ID and asks
again. Requests faster than the push interval are THROTTLING_QUOTA_EXCEEDED (except a push right after a
GetTelemetrySubscriptions, and a terminating push); after a terminating push the instance is refused.
Instances are forgotten after max(60 s, 3 push intervals) without a request, at most 16384 kept.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Mapping

from pybroker.common.client_metrics import ALL_METRICS, DEFAULT_INTERVAL_MS, InvalidSubscription, Subscription, \
    subscription
from pybroker.controller.client_metrics_store import ClientMetricsStore
from pybroker.protocol.error_codes import ErrorCode
from pybroker.records.compression import decompress
from pybroker.records.constants import Compression
from pybroker.records.crc import crc32c
from pybroker.records.errors import CorruptRecordError, RecordTooLargeError
from pybroker.server.telemetry.series import ClientSeriesStore, InvalidPayload, decode

#: Kafka's preference order; the client takes the first it supports.
ACCEPTED_COMPRESSION = (Compression.ZSTD, Compression.LZ4, Compression.GZIP, Compression.SNAPPY)
MAX_INSTANCES = 16384
MIN_EXPIRY_MS = 60_000
ZERO = uuid.UUID(int=0)
RESERVED_IDS = frozenset({ZERO, uuid.UUID(int=1)})  # Kafka's Uuid.RESERVED: zero and the metadata topic id


@dataclass(slots=True)
class ClientInstance:
    instance_id: uuid.UUID
    client: Mapping[str, str]  # the selectors a subscription matches on
    subscription_id: int
    version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    expires_ms: int = 0
    last_get_ms: int = -(1 << 62)
    last_push_ms: int = -(1 << 62)
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE

    def may_get(self, now_ms: int) -> bool:
        if now_ms - max(self.last_get_ms, self.last_push_ms) < self.push_interval_ms:
            return False
        self.last_get_ms = now_ms
        return True

    def may_push(self, now_ms: int) -> bool:
        """A push right after a GetTelemetrySubscriptions is accepted early: clients jitter the first push."""
        if self.last_get_ms <= self.last_push_ms and now_ms - self.last_push_ms < self.push_interval_ms:
            return False
        self.last_push_ms = now_ms
        return True


def java_uuid_hash(value: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode: the 64-bit halves XORed, then the 32-bit halves."""
    mixed = (value.int >> 64) ^ (value.int & (1 << 64) - 1)
    return _int32((mixed >> 32) ^ mixed)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def subscription_id(metrics: tuple[str, ...], push_interval_ms: int, instance_id: uuid.UUID) -> int:
    text = f"[{', '.join(metrics)}]{push_interval_ms}".encode()
    return _int32(crc32c(text) ^ java_uuid_hash(instance_id))


@dataclass(slots=True)
class PushResult:
    error: ErrorCode
    message: str | None = None


@dataclass
class ClientMetricsManager:
    store: ClientMetricsStore
    telemetry_max_bytes: int
    series: ClientSeriesStore = field(default_factory=ClientSeriesStore)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    instances: OrderedDict[uuid.UUID, ClientInstance] = field(default_factory=OrderedDict)
    version: int = 0

    def __post_init__(self) -> None:
        for name, config in self.store.all().items():
            self._update(name, config)
        self.store.listeners.append(self._update)

    def _update(self, name: str, config: Mapping[str, str]) -> None:
        if not config:
            self.subscriptions.pop(name, None)
        else:
            try:
                self.subscriptions[name] = subscription(name, config)
            except InvalidSubscription:
                return  # written past validation (by hand in ZooKeeper): Kafka keeps the old one too
        self.version += 1

    def names(self) -> list[str]:
        return sorted(self.subscriptions)

    def instance(self, instance_id: uuid.UUID, client: Mapping[str, str], now_ms: int) -> ClientInstance:
        """The cached instance (re-matched after a subscription change), else a new one."""
        self._expire(now_ms)
        found = self.instances.get(instance_id)
        if found is None or found.version < self.version:
            found = self._match(instance_id, found.client if found is not None else client)
            self.instances[instance_id] = found
            while len(self.instances) > MAX_INSTANCES:
                self.instances.popitem(last=False)
        self.instances.move_to_end(instance_id)
        found.expires_ms = now_ms + max(MIN_EXPIRY_MS, 3 * found.push_interval_ms)
        return found

    def _match(self, instance_id: uuid.UUID, client: Mapping[str, str]) -> ClientInstance:
        interval = DEFAULT_INTERVAL_MS
        metrics: set[str] = set()
        selectors = dict(client, client_instance_id=str(instance_id))
        for sub in self.subscriptions.values():
            if sub.matches(selectors):
                metrics.update(sub.metrics)
                interval = min(interval, sub.interval_ms)
        requested = (ALL_METRICS,) if ALL_METRICS in metrics else tuple(sorted(metrics))
        return ClientInstance(instance_id, selectors, subscription_id(requested, interval, instance_id),
                              self.version, requested, interval)

    def _expire(self, now_ms: int) -> None:
        while self.instances:
            oldest = next(iter(self.instances.values()))
            if oldest.expires_ms > now_ms:
                break
            self.instances.popitem(last=False)

    def new_instance_id(self) -> uuid.UUID:
        while True:
            candidate = uuid.uuid4()
            if candidate not in self.instances and candidate not in RESERVED_IDS:
                return candidate

    def get_subscriptions(self, requested: uuid.UUID, client: Mapping[str, str], now_ms: int
                          ) -> tuple[ErrorCode, ClientInstance]:
        instance_id = requested if requested != ZERO else self.new_instance_id()
        found = self.instance(instance_id, client, now_ms)
        if not found.may_get(now_ms) and found.last_error not in (ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                                                                   ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED, found
        found.last_error = ErrorCode.NONE
        return ErrorCode.NONE, found

    def push(self, instance_id: uuid.UUID, sub_id: int, terminating: bool, compression: int, metrics: bytes,
             client: Mapping[str, str], now_ms: int) -> PushResult:
        if instance_id in RESERVED_IDS:
            return PushResult(ErrorCode.INVALID_REQUEST,
                              f"Invalid request from the client [{instance_id}], invalid client instance id")
        found = self.instance(instance_id, client, now_ms)
        result = self._validate(found, sub_id, terminating, compression, metrics, now_ms)
        found.terminating = terminating
        if result.error == ErrorCode.NONE and metrics:
            result = self._export(found, compression, metrics, now_ms)
        found.last_error = result.error
        return result

    def _validate(self, found: ClientInstance, sub_id: int, terminating: bool, compression: int, metrics: bytes,
                  now_ms: int) -> PushResult:
        who = found.instance_id
        if found.terminating:
            return PushResult(ErrorCode.INVALID_REQUEST, f"Client [{who}] sent the previous request with state "
                                                         "terminating to TRUE, can not accept any requests after that")
        if not found.may_push(now_ms) and not terminating:
            return PushResult(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                              f"Request from the client [{who}] arrived before the next push interval time")
        if sub_id != found.subscription_id:
            return PushResult(ErrorCode.UNKNOWN_SUBSCRIPTION_ID, f"Unknown client subscription id for the client [{who}]")
        if compression not in (Compression.NONE, *ACCEPTED_COMPRESSION):
            return PushResult(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                              f"Unknown compression type [{compression}] is received in telemetry request from [{who}]")
        if len(metrics) > self.telemetry_max_bytes:
            return PushResult(ErrorCode.TELEMETRY_TOO_LARGE, f"Telemetry request from [{who}] is larger than the "
                                                            f"maximum allowed size [{self.telemetry_max_bytes}]")
        return PushResult(ErrorCode.NONE)

    def _export(self, found: ClientInstance, compression: int, metrics: bytes, now_ms: int) -> PushResult:
        try:
            data = decode(decompress(compression, metrics, max_size=self.telemetry_max_bytes))
        except RecordTooLargeError:
            return PushResult(ErrorCode.TELEMETRY_TOO_LARGE)
        except (CorruptRecordError, InvalidPayload):
            return PushResult(ErrorCode.INVALID_RECORD)
        labels = {key: found.client.get(key, "") for key in
                  ("client_instance_id", "client_id", "client_software_name", "client_software_version")}
        self.series.record(str(found.instance_id), labels, data, now_ms, found.push_interval_ms)
        return PushResult(ErrorCode.NONE)
