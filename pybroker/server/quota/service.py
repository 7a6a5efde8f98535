"""The broker's client quotas: the stored overrides applied to the four managers, and the mutes;
the ip entities' connection_creation_rate goes to the socket server's `ConnectionRates`."""

from __future__ import annotations

from pybroker.common.config import BrokerConfig
from pybroker.controller.quota_store import ClientQuotaStore
from pybroker.server.connection_rates import ConnectionRates
from pybroker.server.quota.enforcement import Gates
from pybroker.server.quota.manager import QuotaManagers


class ClientQuotas:
    def __init__(self, config: BrokerConfig, store: ClientQuotaStore) -> None:
        self.store = store
        self.managers = QuotaManagers.create(config["quota.window.num"], config["quota.window.size.seconds"])
        self.gates = Gates()
        for entity, quotas in store.all().items():
            self.managers.apply(entity, quotas)
        store.listeners.append(self.managers.apply)

    def follow_ip_quotas(self, rates: ConnectionRates) -> None:
        """Keep ``rates`` on the stored ip entities' quotas."""
        for ip, quotas in self.store.ips().items():
            rates.apply_ip(ip, quotas)
        self.store.ip_listeners.append(rates.apply_ip)
