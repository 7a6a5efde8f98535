"""Kafka's ClientQuotaManager, ClientRequestQuotaManager and ControllerMutationQuotaManager.

Each manager enforces one quota key. Overrides are set per entity (user, client id, or both, each
possibly ``<default>``); a client is measured by a sensor named by its metric tags ``(user,
client-id)``, which Kafka's DefaultQuotaCallback picks so that every client sharing a quota shares
a sensor: with quotas at one level only the tags are that level's, otherwise the most specific of
the eight levels that has an override decides (``/config/users/<user>/clients/<client-id>``,
``.../users/<user>/clients/<default>``, ``/config/users/<user>``,
``/config/users/<default>/clients/<client-id>``, ``.../users/<default>/clients/<default>``,
``/config/users/<default>``, ``/config/clients/<client-id>``, ``/config/clients/<default>``).

As in Kafka, a manager stays enabled once any quota of its key was set (until restart), and the
request path pays nothing while none was. Users are matched by their sanitized principal name
(``ANONYMOUS`` on PLAINTEXT), client ids as the request header gives them ("" when null).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from pybroker.common.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)
from pybroker.controller.quota_store import Entity, sanitize
from pybroker.server.quota.stats import Average, Rate, TokenBucket, bounded_throttle_time_ms, throttle_time_ms

NO_QUOTAS, CLIENT_ID_QUOTAS, USER_QUOTAS, USER_CLIENT_ID_QUOTAS = 0, 1, 2, 4
SENSOR_EXPIRY_MS = 3600 * 1000  # Kafka's InactiveSensorExpirationTimeSeconds
NANOS_TO_PERCENTAGE = 100.0 / 1e9

Tags = tuple[str, str]  # (sanitized user or "", client id or "")


@dataclass(slots=True)
class ClientSensor:
    """One quota sensor: the measurement, its limit, and the throttle times it caused."""

    tags: Tags
    rate: Rate
    limit: float | None
    version: int
    bucket: TokenBucket | None = None
    throttle_time: Average = field(default_factory=Average)
    last_used_ms: int = 0


class ClientQuotaManager:
    """One quota key's overrides and sensors (Kafka's ClientQuotaManager with the default callback)."""

    def __init__(self, quota_type: str, key: str, samples: int, window_s: int,
                 max_throttle_ms: int | None = None) -> None:
        self.quota_type = quota_type  # Kafka's QuotaType name: Produce, Fetch, Request, ControllerMutation
        self.key = key
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self.overrides: dict[Entity, float] = {}
        self.enabled_types = NO_QUOTAS
        self.sensors: dict[Tags, ClientSensor] = {}
        self._version = 0
        self._purged_ms = 0

    @property
    def enabled(self) -> bool:
        return self.enabled_types != NO_QUOTAS

    def update(self, entity: Entity, value: float | None) -> None:
        """Set (or with None remove) the override of an entity; live sensors pick it up."""
        user, client = entity
        if user is not None:
            self.enabled_types |= USER_CLIENT_ID_QUOTAS if client is not None else USER_QUOTAS
        elif client is not None:
            self.enabled_types |= CLIENT_ID_QUOTAS
        if value is None:
            self.overrides.pop(entity, None)
        else:
            self.overrides[entity] = value
        self._version += 1

    # Resolution

    def metric_tags(self, user: str, client_id: str) -> Tags:
        """DefaultQuotaCallback.quotaMetricTags for a sanitized user and a raw client id."""
        types = self.enabled_types
        if types in (NO_QUOTAS, CLIENT_ID_QUOTAS):
            return "", client_id
        if types == USER_QUOTAS:
            return user, ""
        if types == USER_CLIENT_ID_QUOTAS:
            return user, client_id
        client = sanitize(client_id)
        has = self.overrides.__contains__
        if has((user, client)) or has((user, DEFAULT)):
            return user, client_id
        if has((user, None)):
            return user, ""
        if has((DEFAULT, client)) or has((DEFAULT, DEFAULT)):
            return user, client_id
        if has((DEFAULT, None)):
            return user, ""
        return "", client_id

    def limit(self, tags: Tags) -> float | None:
        """DefaultQuotaCallback.quotaLimit: the override that applies to these tags, if any."""
        user, client_id = tags
        get = self.overrides.get
        if user and client_id:
            client = sanitize(client_id)
            for entity in ((user, client), (user, DEFAULT), (DEFAULT, client), (DEFAULT, DEFAULT)):
                if (value := get(entity)) is not None:
                    return value
        elif user:
            return value if (value := get((user, None))) is not None else get((DEFAULT, None))
        elif client_id:
            value = get((None, sanitize(client_id)))
            return value if value is not None else get((None, DEFAULT))
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        """The bound that applies to a (raw user name, client id), None when unlimited."""
        return self.limit(self.metric_tags(sanitize(user), client_id))

    def sensor(self, user: str, client_id: str, now_ms: int) -> ClientSensor:
        """The sensor of a sanitized user and client id, created on first use (Kafka's getOrCreateQuotaSensors)."""
        if now_ms - self._purged_ms >= 60000:
            self._purge(now_ms)
        tags = self.metric_tags(user, client_id)
        sensor = self.sensors.get(tags)
        if sensor is None:
            sensor = ClientSensor(tags, Rate(self.samples, self.window_ms), self.limit(tags), self._version)
            self.sensors[tags] = sensor
        elif sensor.version != self._version:
            sensor.limit, sensor.version = self.limit(tags), self._version
        sensor.last_used_ms = now_ms
        return sensor

    # Recording

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record a value; the throttle time in ms if the rate now exceeds the quota, else 0."""
        if not self.enabled:
            return 0
        sensor = self.sensor(user, client_id, now_ms)
        sensor.rate.record(value, now_ms)
        bound = sensor.limit
        if bound is None:
            return 0
        observed = sensor.rate.measure(now_ms)
        if observed <= bound:
            return 0
        window = sensor.rate.window_size(now_ms)
        if self.max_throttle_ms is None:
            return throttle_time_ms(observed, bound, window)
        return bounded_throttle_time_ms(observed, bound, window, self.max_throttle_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers empty), as Kafka's unrecordQuotaSensor."""
        if self.enabled:
            self.sensor(user, client_id, now_ms).rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str, now_ms: int) -> float:
        """getMaxValueInQuotaWindow: the most a single recording may be without certain throttling."""
        if not self.enabled:
            return float("inf")
        bound = self.sensor(user, client_id, now_ms).limit
        return float("inf") if bound is None else bound * (self.samples - 1) * self.window_ms / 1000

    def throttled(self, user: str, client_id: str, throttle_ms: int, now_ms: int) -> None:
        """A client was throttled for this long: its throttle-time metric records it."""
        self.sensor(user, client_id, now_ms).throttle_time.record(throttle_ms, now_ms)

    def _purge(self, now_ms: int) -> None:
        self._purged_ms = now_ms
        for tags in [t for t, s in self.sensors.items() if now_ms - s.last_used_ms >= SENSOR_EXPIRY_MS]:
            del self.sensors[tags]


class ControllerMutationQuotaManager(ClientQuotaManager):
    """controller_mutation_rate (KIP-599): a token bucket of partition mutations per second. Strict
    for CreateTopics v6+, CreatePartitions v3+ and DeleteTopics v5+ (a mutation past an exhausted
    bucket is refused with THROTTLING_QUOTA_EXCEEDED), permissive before (accepted, then throttled)."""

    def sensor(self, user: str, client_id: str, now_ms: int) -> ClientSensor:
        sensor = super().sensor(user, client_id, now_ms)
        if sensor.bucket is None:
            sensor.bucket = TokenBucket(self.samples, self.window_ms)
        return sensor

    def exhausted_ms(self, user: str, client_id: str, now_ms: int) -> int:
        """Strict check before a mutation: the throttle time if the bucket is below zero, else 0."""
        if not self.enabled:
            return 0
        sensor = self.sensor(user, client_id, now_ms)
        if sensor.limit is None or sensor.bucket is None:
            return 0
        tokens = sensor.bucket.measure(sensor.limit, now_ms)
        return round(-tokens / sensor.limit * 1000) if tokens < 0 else 0

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Take ``value`` tokens; the time until the bucket is back at zero if it went below."""
        if not self.enabled:
            return 0
        sensor = self.sensor(user, client_id, now_ms)
        sensor.rate.record(value, now_ms)
        if sensor.limit is None or sensor.bucket is None:
            return 0
        sensor.bucket.record(sensor.limit, value, now_ms)
        tokens = sensor.bucket.measure(sensor.limit, now_ms)
        return round(-tokens / sensor.limit * 1000) if tokens < 0 else 0


@dataclass
class QuotaManagers:
    """The broker's four managers, fed by the quota store."""

    produce: ClientQuotaManager
    fetch: ClientQuotaManager
    request: ClientQuotaManager
    controller_mutation: ControllerMutationQuotaManager
    enabled: bool = field(init=False, default=False)
    """Whether any quota is set at all: asked by every request, so a field that `apply` (the managers' only
    writer) keeps, rather than a property."""

    @classmethod
    def create(cls, samples: int, window_s: int) -> "QuotaManagers":
        return cls(ClientQuotaManager("Produce", PRODUCER_BYTE_RATE, samples, window_s),
                   ClientQuotaManager("Fetch", CONSUMER_BYTE_RATE, samples, window_s),
                   # ClientRequestQuotaManager bounds its throttle time at one window
                   ClientQuotaManager("Request", REQUEST_PERCENTAGE, samples, window_s, max_throttle_ms=window_s * 1000),
                   ControllerMutationQuotaManager("ControllerMutation", CONTROLLER_MUTATION_RATE, samples, window_s))

    @property
    def all(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request, self.controller_mutation

    def bounded(self, user: str, client_id: str) -> bool:
        """Whether any quota applies to this sanitized user and client id."""
        return any(m.enabled_types and m.limit(m.metric_tags(user, client_id)) is not None for m in self.all)

    def apply(self, entity: Entity, config: Mapping[str, str]) -> None:
        """An entity's quota keys changed (store listener): update every manager whose key moved."""
        for manager in self.all:
            text = config.get(manager.key)
            value = float(text) if text is not None else None
            if manager.overrides.get(entity) != value:
                manager.update(entity, value)
        self.enabled = any(m.enabled_types != NO_QUOTAS for m in self.all)
