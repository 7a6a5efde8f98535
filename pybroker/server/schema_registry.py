"""Start-up wiring of the schema registry (pybroker.schema_registry) into the broker process.

A single broker's registry is always the leader. In a ZooKeeper cluster each broker publishes its
registry's URL in an ephemeral znode, and writes go to the registry of the broker leading partition 0
of ``_schemas`` (pybroker.schema_registry.leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
from typing import Callable, Mapping

from pybroker.client.sasl import SaslCredentials
from pybroker.common.config import BrokerConfig, ConfigError
from pybroker.common.topic import topic_name_error
from pybroker.controller.metadata import BrokerInfo
from pybroker.schema_registry import service as registry_service
from pybroker.schema_registry.auth import AclAuthorization, BasicAuthenticator
from pybroker.security.tls import broker_settings, client_context, server_context
from pybroker.schema_registry.leader import PartitionLeadership, forward
from pybroker.schema_registry.registry import SchemaRegistry
from pybroker.schema_registry.service import (Forwarder, Leadership, ListenerUrl, SchemaRegistryService, SoleLeader,
                                              parse_listener)
from pybroker.schema_registry.state import RegistryState
from pybroker.schema_registry.store import KafkaStore
from pybroker.server.services import Services

log = logging.getLogger("pybroker.schema_registry")
ZNODE_ROOT = "/pybroker/schema_registry"
TLS_LISTENER_NAME = "SCHEMA_REGISTRY"
REPUBLISH_INTERVAL_S = 5.0


def registry_listener(config: BrokerConfig) -> ListenerUrl:
    """The one URL the registry serves, and its topic name, checked (ConfigError naming the key)."""
    urls = config["schema.registry.listeners"]
    if len(urls) != 1:
        raise ConfigError("schema.registry.listeners: exactly one URL is served")
    problem = topic_name_error(config["schema.registry.topic"])
    if problem is not None:
        raise ConfigError(f"Invalid value {config['schema.registry.topic']} for configuration "
                          f"schema.registry.topic: {problem}")
    try:
        return parse_listener(urls[0])
    except registry_service.ConfigError as exc:
        raise ConfigError(str(exc)) from None


class BrokerSchemaRegistry:
    """The registry of one broker: configured at construction (bad keys fail start-up), served once the
    broker's listeners are bound, reaching the cluster through this broker's inter-broker listener."""

    def __init__(self, services: Services, broker_info: Callable[[], BrokerInfo], *,
                 inter_broker_tls: ssl.SSLContext | None, inter_broker_sasl: SaslCredentials | None) -> None:
        self._services = services
        self._broker_info = broker_info
        self._inter_broker_tls = inter_broker_tls
        self._inter_broker_sasl = inter_broker_sasl
        config = services.config
        self.listener = registry_listener(config)
        # HTTPS: the broker's ssl.* keys, or listener.name.schema_registry.ssl.* to give the registry its own.
        self.tls_settings = broker_settings(config, TLS_LISTENER_NAME, "SSL")
        self.server_tls = server_context(self.tls_settings) if self.listener.scheme == "https" else None
        self.authenticate = BasicAuthenticator(self._plain_users, self._scram_config) \
            if config["schema.registry.authentication.method"] == "BASIC" else None
        self.service: SchemaRegistryService | None = None
        self.url = ""
        self._publisher: asyncio.Task[None] | None = None
        self._replaying: asyncio.Future[None] | None = None

    async def start(self) -> str:
        config = self._services.config
        inter_broker = self._broker_info()
        store = KafkaStore(f"{inter_broker.host}:{inter_broker.port}", topic=config["schema.registry.topic"],
                           replication_factor=config["schema.registry.topic.replication.factor"],
                           timeout_ms=config["schema.registry.timeout.ms"], tls=self._inter_broker_tls,
                           sasl=self._inter_broker_sasl)
        registry = SchemaRegistry(store, default_level=config["schema.registry.compatibility.level"].upper(),
                                  max_schema_bytes=config["message.max.bytes"] - 512)
        leadership: Leadership = SoleLeader()
        forwarder: Forwarder | None = None
        timeout_s = config["schema.registry.timeout.ms"] / 1000
        if self._services.zk_mode is not None:
            leadership = PartitionLeadership(self._services.broker_id, self._leader_id, self._url_of,
                                             store.ensure_started, timeout_s)

        if self._services.zk_mode is not None:
            forward_tls = None
            if self.server_tls is not None:
                forward_tls = client_context(self.tls_settings)
            forwarder = functools.partial(forward, timeout_s=timeout_s, tls=forward_tls)
        authorizer = self._services.authorizer
        self.service = SchemaRegistryService(
            registry, self.listener, leadership=leadership, max_body_bytes=config["schema.registry.max.request.bytes"],
            ssl_context=self.server_tls, authenticate=self.authenticate, forward=forwarder,
            authorize=AclAuthorization(authorizer, config["schema.registry.topic"]) if authorizer is not None else None)
        url = await self.service.start()
        host = self.listener.host
        self.url = url if host not in ("", "0.0.0.0", "::") else url.replace(
            f"//{host or '0.0.0.0'}:", f"//{inter_broker.host}:", 1)
        if self._services.zk_mode is not None:
            self._publisher = asyncio.get_running_loop().create_task(self._publish(), name="schema-registry-url")
        if self._services.schema_validation.topics:  # validated topics need the view from the first record on
            self.view()
        return url

    def view(self) -> RegistryState | None:
        """The registry's view for broker-side validation (its replay is started on first use); None
        until the registry serves."""
        if self.service is None:
            return None
        store = self.service.registry.store
        if not store.started:
            self._replaying = asyncio.ensure_future(store.ensure_started())
            self._replaying.add_done_callback(lambda task: task.cancelled() or task.exception())
        return store.state

    def _plain_users(self) -> dict[str, str]:
        users: dict[str, str] = {}
        for settings in self._services.sasl.listeners.values():
            users.update(settings.plain_users)
        return users

    def _scram_config(self, user: str) -> Mapping[str, str]:
        return self._services.scram_credentials.user_config(user)

    def _leader_id(self) -> int | None | bool:
        metadata = self._services.started_metadata
        info = metadata.topics().get(self._services.config["schema.registry.topic"]) if metadata is not None else None
        if info is None:
            return False
        partition = info.partitions.get(0)
        return partition.leader if partition is not None and partition.leader >= 0 else None

    async def _url_of(self, broker_id: int) -> str | None:
        assert self._services.zk_mode is not None
        node = await self._services.zk_mode.zk.get(f"{ZNODE_ROOT}/{broker_id}")
        if node is None:
            return None
        with contextlib.suppress(ValueError, AttributeError):
            return json.loads(node[0]).get("url")
        return None

    async def _publish(self) -> None:
        """Keeps this broker's znode naming its registry URL (re-created after a ZooKeeper session loss)."""
        assert self._services.zk_mode is not None
        zk = self._services.zk_mode.zk
        path, data = f"{ZNODE_ROOT}/{self._services.broker_id}", json.dumps({"url": self.url}).encode()
        while True:
            try:
                node = await zk.get(path)
                if node is None:
                    await zk.create(path, data, ephemeral=True, makepath=True)
                elif node[0] != data or node[1].ephemeralOwner != zk.session_id:
                    await zk.delete(path)
                    await zk.create(path, data, ephemeral=True, makepath=True)
            except Exception as exc:  # ZooKeeper away: try again at the next round
                log.debug("Publishing the schema registry URL failed: %s", exc)
            await asyncio.sleep(REPUBLISH_INTERVAL_S)

    async def stop(self) -> None:
        if self._publisher is not None:
            self._publisher.cancel()
        if self.service is not None:
            await self.service.close()
