"""Start-up wiring of the schema registry (pybroker.schema_registry) into the broker process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.common.config import ConfigError
from pybroker.schema_registry.registry import SchemaRegistry
from pybroker.schema_registry.service import SchemaRegistryService, SoleLeader, parse_listener
from pybroker.schema_registry.store import KafkaStore
from pybroker.schema_registry import service as registry_service

if TYPE_CHECKING:
    from pybroker.server.broker import Broker


class BrokerSchemaRegistry:
    """The registry of one broker: configured at construction (bad keys fail start-up), served once the
    broker's listeners are bound, reaching the cluster through this broker's inter-broker listener."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        urls = config["schema.registry.listeners"]
        if len(urls) != 1:
            raise ConfigError("schema.registry.listeners: exactly one URL is served")
        try:
            self.listener = parse_listener(urls[0])
        except registry_service.ConfigError as exc:
            raise ConfigError(str(exc)) from None
        if self.listener.scheme == "https":
            raise ConfigError("schema.registry.listeners: https is not served yet; use http")
        self.service: SchemaRegistryService | None = None

    async def start(self) -> str:
        config = self.broker.config
        inter_broker = self.broker.broker_info()
        store = KafkaStore(f"{inter_broker.host}:{inter_broker.port}", topic=config["schema.registry.topic"],
                           replication_factor=config["schema.registry.topic.replication.factor"],
                           timeout_ms=config["schema.registry.timeout.ms"], tls=self.broker.inter_broker_tls,
                           sasl=self.broker.inter_broker_sasl)
        registry = SchemaRegistry(store, default_level=config["schema.registry.compatibility.level"].upper(),
                                  max_schema_bytes=config["message.max.bytes"] - 512)
        self.service = SchemaRegistryService(registry, self.listener, leadership=SoleLeader(),
                                             max_body_bytes=config["schema.registry.max.request.bytes"])
        return await self.service.start()

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.close()
