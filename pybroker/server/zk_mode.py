"""Wiring of ZooKeeper mode (`zookeeper.connect` set): the ZooKeeper session, this broker's
registration and metadata cache, the controller candidate, the ISR writer and follower fetching.

Start-up order matters: the listener is already bound (the registration publishes its port),
follower fetching is ready before the broker registers (Kafka starts its ReplicaManager before
registerBroker), and metadata is registered before the controller election, so an elected controller
sees this broker. Controller requests wait for `registered` (Kafka does not process requests before
its start-up registered the broker): until then this run's broker epoch is unknown, and the only
registration in ZooKeeper may still be the previous run's, whose requests must be refused.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Callable, Mapping, TypeVar

from kazoo.handlers.threading import KazooTimeoutError

from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaClientError
from pybroker.client.sasl import SaslCredentials
from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.common.config import BrokerConfig
from pybroker.zk import paths as zp
from pybroker.controller.controller import RebalanceConfig, ZkController
from pybroker.controller.metadata import BrokerInfo
from pybroker.controller.producer_ids import ProducerIdBlocks, ProducerIdsUnavailableError
from pybroker.controller.client_metrics_store import ZkClientMetricsStore
from pybroker.controller.group_config_store import ZkGroupConfigStore
from pybroker.controller.quota_store import ZkQuotaStore
from pybroker.controller.scram_store import ZkScramStore
from pybroker.zk.client import SESSION_RECONNECTED, ZkClient, ZkEvent
from pybroker.controller.zk_metadata import ZkMetadata
from pybroker.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from pybroker.protocol.schema import Message
from pybroker.replication.fetcher import FetcherConfig
from pybroker.replication.leader_endpoint import RemoteLeader
from pybroker.replication.manager import ReplicaManager
from pybroker.server.features import ZkFeatures
from pybroker.server.isr_updates import AlterPartitionIsrWriter

log = logging.getLogger("pybroker.server")
M = TypeVar("M", bound=Message)

CONTROLLED_SHUTDOWN_VERSION = 3


class ZooKeeperStartError(OSError):
    """ZooKeeper mode could not start; an OSError so the server reports it as one line and exits 1."""


class ZkMode:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, broker_info: Callable[[], BrokerInfo],
                 validate_topic_configs: Callable[[Mapping[str, str]], None], *,
                 inter_broker_tls: ssl.SSLContext | None, inter_broker_sasl: SaslCredentials | None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        """``clock``: the broker's, which every backoff and deadline here (and the controller's and the
        registration's) waits on, so a test that drives time drives them too."""
        if config["broker.id"] < 0:
            raise ZooKeeperStartError("broker.id must be set (>= 0) in ZooKeeper mode; "
                                      "generated broker ids are not supported yet")
        self._config = config
        self._broker_id: int = config["broker.id"]
        self._replicas = replicas
        self._broker_info = broker_info
        self._validate_topic_configs = validate_topic_configs
        self._tls = inter_broker_tls
        self._sasl = inter_broker_sasl
        self._clock = clock
        self.inter_broker_listener = config.listener_set.inter_broker
        session_ms = config["zookeeper.session.timeout.ms"]
        self.zk = ZkClient(config["zookeeper.connect"], session_timeout_ms=session_ms,
                           connection_timeout_ms=config["zookeeper.connection.timeout.ms"] or session_ms)
        self.metadata: ZkMetadata | None = None
        self.scram_credentials = ZkScramStore(self.zk)
        self.features = ZkFeatures(self.zk)
        self.client_quotas = ZkQuotaStore(self.zk)
        self.client_metrics = ZkClientMetricsStore(self.zk)
        self.group_configs = ZkGroupConfigStore(self.zk)
        self.controller: ZkController | None = None
        self.registered = asyncio.Event()  # set once this run registered, with fetching enabled

    async def start(self) -> ZkMetadata:
        config = self._config
        try:
            await self.zk.start()
        except KazooTimeoutError:
            raise ZooKeeperStartError(f"Timed out connecting to ZooKeeper at {config['zookeeper.connect']}") from None
        await self.scram_credentials.start()  # before registering: SCRAM logins of other brokers follow
        await self.features.start()
        await self.client_quotas.start()
        await self.client_metrics.start()
        await self.group_configs.start()
        replicas, broker_id = self._replicas, self._broker_id
        replicas.isr_writer = AlterPartitionIsrWriter(
            self._ask_controller, broker_id, lambda: self.metadata.broker_epoch if self.metadata else -1, self.zk)
        timeout_s = config["replica.socket.timeout.ms"] / 1000
        replicas.enable_fetching(
            FetcherConfig(replica_id=broker_id, max_wait_ms=config["replica.fetch.wait.max.ms"],
                          min_bytes=config["replica.fetch.min.bytes"], max_bytes=config["replica.fetch.max.bytes"],
                          response_max_bytes=config["replica.fetch.response.max.bytes"],
                          backoff_ms=config["replica.fetch.backoff.ms"]),
            lambda leader_id, host, port: RemoteLeader(host, port, client_id=f"replica-fetcher-{broker_id}",
                                                       timeout_s=timeout_s, tls=self._tls,
                                                       sasl=self._sasl))
        metadata = ZkMetadata(self.zk, self._broker_info(), validate_configs=self._validate_topic_configs,
                              delete_topic_enable=config["delete.topic.enable"],
                              inter_broker_listener=self.inter_broker_listener,
                              producer_ids=ProducerIdBlocks(self._request_producer_id_block,
                                                            config["controller.socket.timeout.ms"] / 1000,
                                                            self._clock),
                              clock=self._clock)
        self.metadata = metadata
        try:
            await metadata.start(registration_wait_s=config["zookeeper.session.timeout.ms"] / 1000)
        except RuntimeError as exc:
            raise ZooKeeperStartError(str(exc)) from None
        self.registered.set()
        self.controller = ZkController(
            self.zk, broker_id, socket_timeout_ms=config["controller.socket.timeout.ms"],
            unclean_election=config["unclean.leader.election.enable"],
            rebalance=RebalanceConfig(config["auto.leader.rebalance.enable"],
                                      config["leader.imbalance.check.interval.seconds"],
                                      config["leader.imbalance.per.broker.percentage"]),
            inter_broker_listener=self.inter_broker_listener, tls=self._tls,
            sasl=self._sasl, delete_topic_enable=config["delete.topic.enable"], clock=self._clock)
        self.zk.on(SESSION_RECONNECTED, self._on_session_reconnected)
        await self.controller.start()
        return metadata

    async def run_events(self) -> None:
        await self.zk.run_events()

    async def _on_session_reconnected(self, event: ZkEvent) -> None:
        """A new session lost the ephemeral znodes: register again and stand for controller again."""
        assert self.metadata is not None and self.controller is not None
        await self.metadata.register(self._config["zookeeper.session.timeout.ms"] / 1000)
        await self.controller.start()

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership off this broker, retrying as Kafka does; after the
        last attempt the broker stops anyway (an unclean shutdown for the partitions it still leads)."""
        config = self._config
        if not config["controlled.shutdown.enable"] or self.metadata is None:
            return
        for attempt in range(1, config["controlled.shutdown.max.retries"] + 1):
            try:
                remaining = await self._clock.wait_for(self._request_controlled_shutdown(),
                                                       config["controller.socket.timeout.ms"] / 1000)
            except (KafkaClientError, OSError, asyncio.TimeoutError) as exc:
                log.info("Controlled shutdown attempt %d failed: %s", attempt, exc)
                remaining = None
            if remaining == []:
                log.info("[KafkaServer id=%d] Controlled shutdown request returned successfully",
                         self._broker_id)
                return
            if remaining:
                log.info("Controlled shutdown attempt %d: still leading %s", attempt, remaining)
            await self._clock.sleep(config["controlled.shutdown.retry.backoff.ms"] / 1000)
        log.warning("Proceeding to do an unclean shutdown as all the controlled shutdown attempts failed")

    async def _request_controlled_shutdown(self) -> list[tuple[str, int]] | None:
        """The partitions still led here after one ControlledShutdown round trip; None on an error."""
        assert self.metadata is not None
        request = ControlledShutdownRequest(broker_id=self._broker_id, broker_epoch=self.metadata.broker_epoch)
        answer = await self._ask_controller(request, CONTROLLED_SHUTDOWN_VERSION, ControlledShutdownResponse,
                                            "controlled-shutdown")
        if answer is None:
            return None
        controller_id, response = answer
        if response.error_code:
            log.info("Controlled shutdown refused by broker %d: error %d", controller_id, response.error_code)
            return None
        return [(p.topic_name, p.partition_index) for p in response.remaining_partitions]

    async def _request_producer_id_block(self) -> zp.ProducerIdBlock:
        """A producer-id block from the active controller (AllocateProducerIds, KIP-730), asked again
        with a growing backoff while the controller moves or has not seen this broker's registration
        yet, for at most controller.socket.timeout.ms."""
        assert self.metadata is not None
        deadline = self._clock.monotonic() + self._config["controller.socket.timeout.ms"] / 1000
        backoff, problem = 0.1, "no controller"
        while True:
            request = AllocateProducerIdsRequest(broker_id=self._broker_id,
                                                 broker_epoch=self.metadata.broker_epoch)
            try:
                answer = await self._ask_controller(request, 0, AllocateProducerIdsResponse, "producer-id-manager")
            except (KafkaClientError, OSError, asyncio.TimeoutError) as exc:
                answer, problem = None, repr(exc)
            if answer is not None:
                controller_id, response = answer
                if response.error_code == 0:
                    return zp.ProducerIdBlock(self._broker_id, response.producer_id_start,
                                              response.producer_id_start + response.producer_id_len - 1)
                problem = f"error {response.error_code} from controller {controller_id}"
            if self._clock.monotonic() + backoff > deadline:
                raise ProducerIdsUnavailableError(f"No producer id block from the controller: {problem}")
            await self._clock.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _ask_controller(self, request: Message, version: int, response_class: type[M],
                              client_id: str) -> tuple[int, M] | None:
        """(controller id, its response) for one round trip to the controller this broker's metadata
        names (from UpdateMetadata and its /controller watch, as Kafka's broker-to-controller channel
        finds it: no ZooKeeper read, so it works while the session is down); None when none is known."""
        assert self.metadata is not None
        controller = self.metadata.broker(self.metadata.controller_id)
        if controller is None:
            return None
        timeout = self._config["controller.socket.timeout.ms"] / 1000
        connection = await Connection.open(controller.host, controller.port, tls=self._tls,
                                           sasl=self._sasl, client_id=client_id, timeout=timeout)
        try:
            return controller.broker_id, await connection.send_at(request, version, response_class, timeout=timeout)
        finally:
            await connection.close()

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        await self._replicas.shutdown()
        await self.zk.stop()
