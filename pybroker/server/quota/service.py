"""The broker's client quotas: the stored overrides applied to the four managers, and the mutes;
the ip entities' connection_creation_rate goes to the socket server's `ConnectionRates`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pybroker.common.clock import Clock
from pybroker.common.config import BrokerConfig
from pybroker.controller.quota_store import ClientQuotaStore
from pybroker.server.connection_rates import ConnectionRates
from pybroker.server.quota.manager import QuotaManagers

MUTE_SWEEP = 1024  # expired mutes are dropped once the table is this large


@dataclass(slots=True)
class Gate:
    """A quota-bound connection's requests pass one at a time, none while it is muted."""

    clock: Clock
    until: float = 0.0  # on the clock's monotonic time
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def closed(self) -> bool:
        return self.lock.locked() or self.until > self.clock.monotonic()

    async def wait(self) -> None:
        while (left := self.until - self.clock.monotonic()) > 0:
            await self.clock.sleep(left)


class Gates:
    """The gates of quota-bound connections, keyed by (listener, peer address)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._gates: dict[tuple[str, str], Gate] = {}

    def get(self, key: tuple[str, str]) -> Gate:
        gate = self._gates.get(key)
        if gate is None:
            if len(self._gates) >= MUTE_SWEEP:
                self._gates = {k: g for k, g in self._gates.items() if g.closed()}
            gate = self._gates[key] = Gate(self._clock)
        return gate

    def mute(self, key: tuple[str, str], seconds: float) -> None:
        gate = self.get(key)
        gate.until = max(gate.until, self._clock.monotonic() + seconds)




class ClientQuotas:
    def __init__(self, config: BrokerConfig, store: ClientQuotaStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock  # the quota windows and the mutes are measured on it
        self.managers = QuotaManagers.create(config["quota.window.num"], config["quota.window.size.seconds"])
        self.gates = Gates(clock)
        for entity, quotas in store.all().items():
            self.managers.apply(entity, quotas)
        store.listeners.append(self.managers.apply)

    def follow_ip_quotas(self, rates: ConnectionRates) -> None:
        """Keep ``rates`` on the stored ip entities' quotas."""
        for ip, quotas in self.store.ips().items():
            rates.apply_ip(ip, quotas)
        self.store.ip_listeners.append(rates.apply_ip)
