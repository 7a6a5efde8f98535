"""Wiring: config -> metadata -> logs -> partitions -> listener, plus the background schedules.

This is the one place that decides the event loop, the listening socket and the lifecycle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
import uuid
from typing import TYPE_CHECKING, Awaitable, Callable, Mapping, Sequence

from pybroker.common.clock import SystemClock
from pybroker.common.config import BrokerConfig
from pybroker.common.io_executor import IoExecutor
from pybroker.common.open_files import DescriptorBudget, raise_open_files_limit
from pybroker.common.listeners import Endpoint
from pybroker.controller.embedded import EmbeddedMetadata
from pybroker.controller.errors import InvalidTopicConfigError, UnknownTopicError
from pybroker.controller.metadata import BrokerInfo, ClusterMetadata, PartitionInfo, TopicInfo
from pybroker.controller.acl_store import AclStore, FileAclStore, ZkAclStore
from pybroker.controller.client_metrics_store import FileClientMetricsStore
from pybroker.controller.group_config_store import FileGroupConfigStore
from pybroker.controller.quota_store import FileQuotaStore
from pybroker.controller.scram_store import FileScramStore, ScramCredentialStore
from pybroker.log.config import LogConfig
from pybroker.log.manager import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from pybroker.protocol.primitives import share_uuid
from pybroker.replication.log_dir_mover import LogDirMover
from pybroker.replication.manager import ReplicaManager
from pybroker.server.authorization import build_authorizer
from pybroker.server.dispatcher import Dispatcher, served_handlers
from pybroker.server.features import FeatureStore, LocalFeatures
from pybroker.server.fetch_sessions import FetchSessionCache
from pybroker.server.group_service import GroupService
from pybroker.server.handlers import ALL_HANDLERS
from pybroker.server.listeners import advertised_endpoints, inter_broker_tls, listener_specs, unauthenticated_exposure
from pybroker.server.log_dir_events import LogDirEventAnnouncer
from pybroker.server.quota.service import ClientQuotas
from pybroker.server.telemetry.manager import ClientMetricsManager
from pybroker.server.sasl_session import SaslAuthenticator
from pybroker.server.share_persister import SharePersister
from pybroker.server.share_service import ShareService
from pybroker.server.share_state_service import ShareStateService
from pybroker.schema_registry.validation import SchemaValidation
from pybroker.server.services import Services
from pybroker.server.socket_server import SocketServer
from pybroker.server import topic_creation
from pybroker.server.topic_configs import TopicConfigs
from pybroker.server.txn_service import TxnService

if TYPE_CHECKING:
    from pybroker.server.broker_metrics import BrokerMetrics
    from pybroker.server.schema_registry import BrokerSchemaRegistry
    from pybroker.server.zk_mode import ZkMode

log = logging.getLogger("pybroker.server")


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        # The one clock every timer and deadline below reads (Kafka's Time.SYSTEM), handed down, never global.
        self.clock = SystemClock()
        self.broker_id = max(config["broker.id"], 0)
        self.listeners = config.listener_set
        self._listener_specs = listener_specs(config)  # TLS material read now: bad keys fail start-up
        self.inter_broker_tls = inter_broker_tls(config)
        self.sasl = SaslAuthenticator(config, lambda: self.scram_credentials, self.clock)
        self.inter_broker_sasl = self.sasl.inter_broker  # how our own inter-broker clients log in
        self.endpoints: tuple[Endpoint, ...] = ()  # advertised, once the listeners are bound
        self.topic_configs = TopicConfigs(config)
        self._auto_creating: set[str] = set()
        """Topics whose auto-creation this broker started and has not finished (Kafka's inflightTopics)."""
        # Before any log is opened: a broker with many partitions needs the hard limit, not the soft one.
        self.open_files = DescriptorBudget(raise_open_files_limit(), config["open.files.headroom"])
        self.log_manager = LogManager(config.log_dirs, self.topic_configs.log_config({}),
                                      recovery_threads=config["num.recovery.threads.per.data.dir"])
        self.io = IoExecutor(config["background.threads"])  # fsyncs; kazoo keeps asyncio's default pool
        # Kafka's kafka-log-cleaner-thread-N: cleaning reads and rewrites whole segments, so it has threads
        # of its own rather than asyncio's default pool, where kazoo's blocking calls wait their turn.
        self._cleaner_threads = ThreadPoolExecutor(max(1, config["log.cleaner.threads"]),
                                                   thread_name_prefix="pybroker-log-cleaner")
        self.replica_manager = ReplicaManager(self.log_manager, self.broker_id, self.clock,
                                              replica_lag_time_max_ms=config["replica.lag.time.max.ms"], io=self.io)
        self.log_dir_mover = LogDirMover(self.replica_manager, self.io,
                                         lambda: self.config["replica.alter.log.dirs.io.max.bytes.per.second"])
        self.zk_mode: ZkMode | None = None
        if config["zookeeper.connect"]:
            # Imported only here: the ZooKeeper session, the controller and its writers (~0.6 MiB) are not a
            # single node's on embedded metadata.
            from pybroker.server.zk_mode import ZkMode

            self.zk_mode = ZkMode(config, self.replica_manager, self.broker_info, self.validate_topic_configs,
                                  inter_broker_tls=self.inter_broker_tls, inter_broker_sasl=self.inter_broker_sasl,
                                  clock=self.clock)
        if self.zk_mode is not None:
            self.log_manager.dir_failure_listeners.append(LogDirEventAnnouncer(self.zk_mode.zk, self.broker_id))
        self.groups = GroupService(config, self._started_metadata, self.replica_manager, self.log_manager, self.io,
                                   self.clock)
        self.features: FeatureStore = LocalFeatures(config.log_dirs[0]) if self.zk_mode is None else self.zk_mode.features
        self.txns = TxnService(config, self.broker_id, self._started_metadata, self.replica_manager,
                               self.log_manager, self.io, self.groups.coordinator, self.clock, self.features,
                               zk=self.zk_mode.zk if self.zk_mode is not None else None,
                               inter_broker_tls=self.inter_broker_tls, inter_broker_sasl=self.inter_broker_sasl)
        self.share_state = ShareStateService(config, self._started_metadata, self.replica_manager, self.log_manager,
                                             self.io, self.clock)
        self.share_persister = SharePersister(self.broker_id, self._started_metadata, self.share_state,
                                              timeout_ms=config["share.coordinator.write.timeout.ms"],
                                              tls=self.inter_broker_tls, sasl=self.inter_broker_sasl)
        self.share = ShareService(config, self._started_metadata, self.groups.coordinator, self.share_persister,
                                  FileGroupConfigStore(config.log_dirs[0]) if self.zk_mode is None
                                  else self.zk_mode.group_configs, self.groups.write,
                                  self.replica_manager.records_acquirable, self.clock)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"],
                                                config["min.incremental.fetch.session.eviction.ms"])
        self.replica_manager.leadership_listeners += [self.groups.on_leadership_change,
                                                      self.txns.on_leadership_change,
                                                      self.share.on_leadership_change,
                                                      self.share_state.on_leadership_change]
        # SCRAM credentials: the embedded store is read now, ZooKeeper's once its session is up.
        self.scram_credentials: ScramCredentialStore = \
            FileScramStore(config.log_dirs[0]) if self.zk_mode is None else self.zk_mode.scram_credentials
        self.quotas = ClientQuotas(config, FileQuotaStore(config.log_dirs[0]) if self.zk_mode is None
                                   else self.zk_mode.client_quotas, self.clock)
        self.client_metrics = ClientMetricsManager(FileClientMetricsStore(config.log_dirs[0]) if self.zk_mode is None
                                                   else self.zk_mode.client_metrics, config["telemetry.max.bytes"])
        # ACLs: None without authorizer.class.name; the store fills the authorizer before serving.
        self.authorizer = build_authorizer(config)
        self.acl_store: AclStore | None = None
        if self.authorizer is not None:
            self.acl_store = FileAclStore(config.log_dirs[0], self.authorizer) if self.zk_mode is None \
                else ZkAclStore(self.zk_mode.zk, self.authorizer, self.clock)
        self.schema_registry: BrokerSchemaRegistry | None = None
        self.schema_validation = SchemaValidation(lambda: self.schema_registry.view()
                                                  if self.schema_registry is not None else None)
        # Set once the metadata is ready: the listener is bound earlier (a ZooKeeper registration
        # publishes its port), and like Kafka, which processes no request before start-up finished,
        # the dispatcher holds client requests until then.
        self.serving = asyncio.Event()
        handlers = served_handlers(config, ALL_HANDLERS)
        self.services = Services(
            config=config, clock=self.clock, broker_id=self.broker_id, replica_manager=self.replica_manager,
            log_manager=self.log_manager, log_dir_mover=self.log_dir_mover, io=self.io, open_files=self.open_files,
            topic_configs=self.topic_configs, validate_topic_configs=self.validate_topic_configs,
            auto_create_topic=self.auto_create_topic, groups=self.groups, txns=self.txns,
            fetch_sessions=self.fetch_sessions, features=self.features, quotas=self.quotas,
            client_metrics=self.client_metrics, sasl=self.sasl, scram_credentials=self.scram_credentials,
            schema_validation=self.schema_validation, authorizer=self.authorizer, acl_store=self.acl_store,
            zk_mode=self.zk_mode, serving=self.serving, apis=handlers, share=self.share,
            share_state=self.share_state)
        self.dispatcher = Dispatcher(self.services, handlers)
        self.socket_server = SocketServer(config, self.dispatcher, self.clock)
        self.quotas.follow_ip_quotas(self.socket_server.rates)
        # Off (None) unless metrics.port is set, so the request path pays nothing for unscraped counters
        # and the process does not load prometheus_client.
        self.metrics: BrokerMetrics | None = None
        if config["metrics.port"] >= 0:
            from pybroker.server.broker_metrics import BrokerMetrics

            self.metrics = BrokerMetrics(self.services, self.socket_server)
        self.services.metrics = self.metrics
        if config["schema.registry.listeners"]:
            # Imported only here: the registry's HTTP server and Kafka client cost ~1.1 MiB a broker without it skips.
            from pybroker.server.schema_registry import BrokerSchemaRegistry

            self.schema_registry = BrokerSchemaRegistry(self.services, self.broker_info,
                                                        inter_broker_tls=self.inter_broker_tls,
                                                        inter_broker_sasl=self.inter_broker_sasl)
        self._tasks: list[asyncio.Task[None]] = []
        self.bound_port: int | None = None

    async def start(self) -> None:
        self.log_manager.startup(self.clock.wall_ms(), strays_checked=self.zk_mode is None)  # see move_strays below
        self.log_manager.attach_executor(self.io)
        ports = {}
        for spec in self._listener_specs:
            ports[spec.endpoint.listener] = self.socket_server.start(spec)
            log.info("Awaiting socket connections on %s:%d (listener %s, %s).", spec.endpoint.host or "0.0.0.0",
                     ports[spec.endpoint.listener], spec.endpoint.listener, spec.endpoint.security_protocol)
        self.bound_port = ports[self._listener_specs[0].endpoint.listener]
        exposed = unauthenticated_exposure(self.config)
        if exposed:
            log.warning("Listener %s accepts clients on a non-loopback address without authentication: whoever "
                        "reaches it may read, write and delete every topic. Bind 127.0.0.1, or use SASL_SSL, "
                        "SASL_PLAINTEXT or SSL with ssl.client.auth=required (docs/troubleshooting.md).",
                        ", ".join(dataclasses.replace(e, port=ports[e.listener]).uri() for e in exposed))
        self.endpoints = advertised_endpoints(self.listeners, ports)
        metadata: ClusterMetadata
        if self.zk_mode is not None:
            self.replica_manager.load_epoch_caches()  # before the controller's first LeaderAndIsr can come
            metadata = await self.zk_mode.start()
            self._tasks.append(asyncio.get_running_loop().create_task(self.zk_mode.run_events(), name="zookeeper"))
            self._schedule("isr-expiration", self.config["replica.lag.time.max.ms"] // 2,
                           self.replica_manager.shrink_isrs)
        else:
            metadata = EmbeddedMetadata(
                self.config.log_dirs[0], self.broker_info(),
                validate_configs=self.validate_topic_configs,
                delete_topic_enable=self.config["delete.topic.enable"])
            # Before any partition is served: a log whose topic id the metadata does not hold is moved aside.
            self.log_manager.move_strays(functools.partial(_replicas_of, metadata), self.broker_id)
            self.replica_manager.load_epoch_caches()
        metadata.add_listener(self._on_topic_change)
        self.services.started_metadata = metadata
        if self.acl_store is not None:
            await self.acl_store.start()
        self.serving.set()
        for name, info in metadata.topics().items():
            self._on_topic_change(name, info)
        self._tasks.append(self.groups.start())
        self._tasks.append(self.txns.start())
        self._tasks.append(self.share.start())
        self._tasks.append(self.share_state.start())
        self._schedule("producer-id-expiration", self.config["producer.id.expiration.check.interval.ms"],
                       self._expire_producer_ids)
        self._schedule("log-retention", self.config["log.retention.check.interval.ms"], self._retention)
        self._schedule("log-flusher", min(self.config.flush_ms, 1000), self._flush)
        if self.config["log.cleaner.enable"]:
            self._schedule("log-cleaner", self.config["log.cleaner.backoff.ms"], self._clean)
        self._schedule("recovery-point-checkpoint", self.config["log.flush.offset.checkpoint.interval.ms"],
                       lambda: self.log_manager.checkpoint_async((RECOVERY_POINT_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT)))
        self._schedule("log-start-offset-checkpoint", self.config["log.flush.start.offset.checkpoint.interval.ms"],
                       lambda: self.log_manager.checkpoint_async((LOG_START_OFFSET_CHECKPOINT,)))
        if self.metrics is not None:
            await self.metrics.serve(self.config["metrics.host"], self.config["metrics.port"])
        if self.schema_registry is not None:
            await self.schema_registry.start()
        log.info("[KafkaServer id=%d] started (cluster id %s), listening on %s:%d", self.broker_id,
                 metadata.cluster_id, self._listener_specs[0].endpoint.host or "0.0.0.0", self.bound_port)

    @property
    def metadata(self) -> ClusterMetadata | None:
        """The cluster's metadata, once started."""
        return self.services.started_metadata

    def _started_metadata(self) -> ClusterMetadata:
        assert self.metadata is not None, "the broker has not started"
        return self.metadata

    def broker_info(self) -> BrokerInfo:
        """This broker as others see it: reached on the inter-broker listener, every listener advertised."""
        inter_broker = next(e for e in self.endpoints if e.listener == self.listeners.inter_broker)
        return BrokerInfo(self.broker_id, inter_broker.host, inter_broker.port, self.config["broker.rack"],
                          self.endpoints)

    async def stop(self) -> None:
        log.info("[KafkaServer id=%d] shutting down", self.broker_id)
        if self.zk_mode is not None:  # while the listener, tasks and ZooKeeper session still run
            await self.zk_mode.controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        self.groups.partitions.loading.cancel_all()
        self.txns.partitions.loading.cancel_all()
        self.share_state.partitions.loading.cancel_all()
        if self.metrics is not None:
            await self.metrics.close()
        if self.schema_registry is not None:
            await self.schema_registry.stop()
        await self.socket_server.stop()
        self.replica_manager.topic_changes.cancel_all()
        self.groups.close()
        await self.txns.close()
        await self.share_persister.close()
        if self.zk_mode is not None:
            await self.zk_mode.stop()
        await self.log_dir_mover.shutdown()
        await self.replica_manager.epochs_written()  # the background leader-epoch-checkpoint writes, while io runs
        self.io.shutdown()
        self._cleaner_threads.shutdown(cancel_futures=True)  # a running job ends before the logs close
        self.log_manager.shutdown()
        log.info("[KafkaServer id=%d] shut down completed", self.broker_id)

    # Topics

    def validate_topic_configs(self, overrides: Mapping[str, str]) -> None:
        try:
            self.topic_configs.validate(overrides)
        except ValueError as exc:
            raise InvalidTopicConfigError(str(exc)) from None

    def _on_topic_change(self, name: str, info: TopicInfo | None) -> None:
        self.schema_validation.on_topic_change(name, info.configs if info is not None else None)
        if info is not None:
            share_uuid(info.topic_id)  # requests then carry the metadata's own topic id object
        if info is None:
            # In a cluster only the controller's StopReplica deletes a replica, as in Kafka: an update of
            # the metadata cache never does, so a wrong one cannot cost data.
            if self.zk_mode is None:
                self.replica_manager.topic_changes.apply(name, functools.partial(self.replica_manager.remove_topic,
                                                                                 name))
            if self.metrics is not None:
                self.metrics.remove_topic(name)
            return
        if self.zk_mode is None:  # in a cluster, the controller's LeaderAndIsr assigns the roles
            self.replica_manager.topic_changes.apply(name, functools.partial(self._lead_topic, name, info))
        else:
            self.replica_manager.update_config(name, self.topic_configs.log_config(info.configs),
                                               self.topic_configs.min_insync_replicas(info.configs))

    def _lead_topic(self, name: str, info: TopicInfo) -> Awaitable[None] | None:
        """Single node: lead the topic's partitions at once when their logs exist; else returns what
        makes the new logs off the loop (`RoleChanges.become_leader_async`) and then leads them."""
        log_config = self.topic_configs.log_config(info.configs)
        min_isr = self.topic_configs.min_insync_replicas(info.configs)
        led = {index: p for index, p in info.partitions.items() if p.leader == self.broker_id}
        if any(self.replica_manager.role_changes.must_create_log(name, index) for index in led):
            return self._lead_new_logs(name, info, led, log_config, min_isr)
        for index, partition in led.items():
            self.replica_manager.become_leader(
                name, index, info.topic_id, leader_epoch=partition.leader_epoch, replicas=partition.replicas,
                isr=partition.isr, config=log_config, min_insync_replicas=min_isr)
        self.replica_manager.update_config(name, log_config, min_isr)
        return None

    async def _lead_new_logs(self, name: str, info: TopicInfo, led: Mapping[int, PartitionInfo],
                             log_config: LogConfig, min_isr: int) -> None:
        outcomes = await asyncio.gather(*(
            self.replica_manager.role_changes.become_leader_async(
                name, index, info.topic_id, leader_epoch=partition.leader_epoch, replicas=partition.replicas,
                isr=partition.isr, config=log_config, min_insync_replicas=min_isr)
            for index, partition in led.items()), return_exceptions=True)
        self.replica_manager.update_config(name, log_config, min_isr)
        failures = [(index, outcome) for index, outcome in zip(led, outcomes) if isinstance(outcome, BaseException)]
        for index, failure in failures:
            log.error("Creating the log of %s-%d failed: %s", name, index, failure, exc_info=failure)
        if failures:
            raise failures[0][1]

    async def auto_create_topic(self, name: str) -> None:
        """Raises UnknownTopicError while an auto-creation of ``name`` this broker started is in flight: Kafka's
        AutoTopicCreationManager answers a Metadata request for such a topic UNKNOWN_TOPIC_OR_PARTITION (its
        inflightTopics), not LEADER_NOT_AVAILABLE as it answers the request that created it."""
        assert self.metadata is not None
        if name in self._auto_creating:
            raise UnknownTopicError(f"Topic '{name}' is being created")
        self._auto_creating.add(name)
        try:
            await topic_creation.create_topic(self, name, self.config["num.partitions"],
                                              self.config["default.replication.factor"], {})
        finally:
            self._auto_creating.discard(name)

    # Background work

    def _schedule(self, name: str, interval_ms: int, work: Callable[[], Awaitable[None] | None]) -> None:
        async def loop() -> None:
            while True:
                await self.clock.sleep(interval_ms / 1000)
                try:
                    result = work()
                    if result is not None:
                        await result
                except Exception:
                    log.exception("Background task %s failed", name)

        self._tasks.append(asyncio.get_running_loop().create_task(loop(), name=name))

    def _retention(self) -> None:
        deleted = self.log_manager.run_retention(self.clock.wall_ms())
        if deleted:
            log.info("Retention deleted %d segment(s)", deleted)
            self.replica_manager.drop_epochs_below_log_starts()

    async def _clean(self) -> None:
        """One log-cleaner pass: plan on the loop, segment I/O in threads, swap on the loop."""
        jobs = self.log_manager.plan_cleaning(self.clock.wall_ms(), max_jobs=self.config["log.cleaner.threads"],
                                              dedupe_buffer_size=self.config["log.cleaner.dedupe.buffer.size"])
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._cleaner_threads, job.run) for job in jobs))
        for job in jobs:
            self.log_manager.finish_cleaning(job, self.clock.wall_ms())

    async def _flush(self) -> None:
        await self.log_manager.flush_dirty_async(self.clock.wall_ms())

    def _expire_producer_ids(self) -> None:
        expiration_ms, now = self.config["producer.id.expiration.ms"], self.clock.wall_ms()
        for partition in self.replica_manager.partitions():
            partition.log.producer_state.remove_expired(now, expiration_ms)


def _replicas_of(metadata: ClusterMetadata, topic_id: uuid.UUID, index: int) -> Sequence[int] | None:
    """The replicas ``metadata`` gives partition ``index`` of the topic with that id (None: no such partition)."""
    info = metadata.topic_by_id(topic_id)
    partition = None if info is None else info.partitions.get(index)
    return None if partition is None else partition.replicas
