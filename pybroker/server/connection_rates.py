"""KIP-612 connection creation rates, as Kafka's ConnectionQuotas measures them.

- ``max.connection.creation.rate`` (broker-wide) and ``listener.name.<l>.max.connection.creation.rate``
  (per listener), both unbounded by default: past either, the listener's acceptor waits until the
  rate is back under the bound, so new clients wait in the listen backlog. With more than one
  listener, the inter-broker listener counts against its own bound only (Kafka's protected listener).
- The ``connection_creation_rate`` quota of an ``ip`` entity (an address, or ``<default>`` for every
  address without one of its own; set with AlterClientQuotas or ``pybroker configs --entity-type
  ips``): past it, a new connection from that address is accepted and, unserved, closed once the
  throttle time has passed, and counts against no bound.

Each bound is a `Rate` over ``quota.window.num`` windows of ``quota.window.size.seconds`` (so a fresh
address may open ``rate * (quota.window.num - 1) * window`` connections at once), the delay Kafka's
QuotaUtils.boundedThrottleTime, at most one window.
"""

from __future__ import annotations

from typing import Mapping

from pybroker.common.client_quotas import CONNECTION_CREATION_RATE, DEFAULT, INT_MAX, normalized_ip
from pybroker.common.config import BrokerConfig
from pybroker.server.quota.stats import Rate, bounded_throttle_time_ms
from pybroker.server.sasl_session import listener_value

RATE_KEY = "max.connection.creation.rate"
SENSOR_EXPIRY_MS = 3600 * 1000  # Kafka's InactiveSensorExpirationTimeSeconds for an address's sensor
PURGE_INTERVAL_MS = 60_000


class _Bound:
    """One rate and its bound (None: unbounded, nothing measured)."""

    def __init__(self, bound: int | None, samples: int, window_ms: int) -> None:
        self.bound = bound
        self.rate = Rate(samples, window_ms)
        self.window_ms = window_ms

    def record(self, value: float, now_ms: int) -> int:
        """Record ``value`` connections; the throttle time in ms if the rate now exceeds the bound."""
        if self.bound is None:
            return 0
        self.rate.record(value, now_ms)
        observed = self.rate.measure(now_ms)
        if observed <= self.bound:
            return 0
        return max(bounded_throttle_time_ms(observed, self.bound, self.rate.window_size(now_ms), self.window_ms), 1)


class ConnectionRates:
    """The broker's connection creation bounds: broker-wide, per listener and per address."""

    def __init__(self, config: BrokerConfig) -> None:
        self.samples = config["quota.window.num"]
        self.window_ms = config["quota.window.size.seconds"] * 1000
        listeners = [e.listener for e in config.listener_set.bound]
        self.protected = config.listener_set.inter_broker if len(listeners) > 1 else None
        self.broker = self._bound(config[RATE_KEY])
        self.listeners = {name: self._bound(listener_value(config, name, RATE_KEY)) for name in listeners}
        self.ip_quotas: dict[str, int] = {}
        """Address (or ``<default>``) -> connection_creation_rate, from the quota store."""
        self._ips: dict[str, _Bound] = {}
        self._purged_ms = 0

    def _bound(self, rate: int | None) -> _Bound:
        return _Bound(None if rate is None or rate >= INT_MAX else rate, self.samples, self.window_ms)

    def apply_ip(self, ip: str, config: Mapping[str, str]) -> None:
        """An ip entity's quota changed (the quota store's listener)."""
        text = config.get(CONNECTION_CREATION_RATE)
        if text is None:
            self.ip_quotas.pop(ip, None)
        else:
            self.ip_quotas[ip] = int(float(text))
        self._ips.clear()  # rebuilt with the new bounds as addresses connect

    def accept_delay_ms(self, listener: str, now_ms: int) -> int:
        """Record a new connection on ``listener``: how long its acceptor waits first (0: at once)."""
        delay = 0 if listener == self.protected else self.broker.record(1, now_ms)
        bound = self.listeners.get(listener)
        return max(delay, bound.record(1, now_ms) if bound is not None else 0)

    def ip_throttle_ms(self, address: str, listener: str, now_ms: int) -> int:
        """Record a new connection from ``address``; past its quota, the throttle time, and the
        connection is then counted nowhere (Kafka un-records it from every rate)."""
        ip = normalized_ip(address) or address
        limit = self.ip_quotas.get(ip, self.ip_quotas.get(DEFAULT))
        if limit is None:
            return 0
        if now_ms - self._purged_ms >= PURGE_INTERVAL_MS:
            self._purge(now_ms)
        bound = self._ips.get(ip)
        if bound is None:
            bound = self._ips[ip] = self._bound(limit)
        throttle = bound.record(1, now_ms)
        if throttle:
            bound.record(-1, now_ms)
            for shared in (self.broker if listener != self.protected else None, self.listeners.get(listener)):
                if shared is not None and shared.bound is not None:
                    shared.rate.record(-1, now_ms)
        return throttle

    def _purge(self, now_ms: int) -> None:
        self._purged_ms = now_ms
        for ip in [ip for ip, bound in self._ips.items() if now_ms - bound.rate.idle_since() >= SENSOR_EXPIRY_MS]:
            del self._ips[ip]
