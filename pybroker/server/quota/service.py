"""The broker's client quotas: the stored overrides applied to the four managers, and the mutes."""

from __future__ import annotations

from pybroker.common.config import BrokerConfig
from pybroker.controller.quota_store import ClientQuotaStore
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
