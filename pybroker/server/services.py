"""The services the request handlers use, as Kafka hands them to KafkaApis: each one narrow (the
replica manager, the metadata, the authorizer, the coordinators, the quotas, the config...), and
none of them the broker. `Broker` builds them and fills in this record once; a handler reads
``ctx.services.<service>`` and sees nothing else of the broker, so a handler can be driven with
only the services it uses.

Nothing here imports the handlers, the dispatcher or the broker: the arrows point from them to
this module, never back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Mapping, Protocol

from pybroker.common.clock import Clock
from pybroker.common.config import BrokerConfig
from pybroker.common.io_executor import IoExecutor
from pybroker.common.open_files import DescriptorBudget
from pybroker.controller.acl_store import AclStore
from pybroker.controller.metadata import ClusterMetadata
from pybroker.controller.scram_store import ScramCredentialStore
from pybroker.log.manager import LogManager
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.replication.log_dir_mover import LogDirMover
from pybroker.replication.manager import ReplicaManager
from pybroker.schema_registry.validation import SchemaValidation
from pybroker.security.authorizer import Authorizer
from pybroker.server.features import FeatureStore
from pybroker.server.fetch_sessions import FetchSessionCache
from pybroker.server.group_service import GroupService
from pybroker.server.quota.service import ClientQuotas
from pybroker.server.sasl_session import SaslAuthenticator
from pybroker.server.share_service import ShareService
from pybroker.server.share_state_service import ShareStateService
from pybroker.server.telemetry.manager import ClientMetricsManager
from pybroker.server.topic_configs import TopicConfigs
from pybroker.server.txn_service import TxnService

if TYPE_CHECKING:
    from pybroker.server.zk_mode import ZkMode  # imported by a broker in ZooKeeper mode only


class ApiRange(Protocol):
    """An API this broker serves, as ApiVersions advertises it (a handler of the registry)."""

    @property
    def api_key(self) -> int: ...

    @property
    def min_version(self) -> int: ...

    @property
    def max_version(self) -> int: ...


class RequestMetrics(Protocol):
    """The traffic counters the request path bumps (`metrics.BrokerMetrics` when metrics.port is set)."""

    def observe_request(self, api_key: int, version: int, started: float) -> None: ...

    def record_produce(self, topic: str, size: int, records: int) -> None: ...

    def record_fetch(self, version: int, request: FetchRequest, response: FetchResponse) -> None: ...


@dataclass(eq=False, slots=True)
class Services:
    config: BrokerConfig
    clock: Clock
    """The broker's one clock: request times, quota windows, delays and deadlines are read from it."""
    broker_id: int
    replica_manager: ReplicaManager
    log_manager: LogManager
    log_dir_mover: LogDirMover
    io: IoExecutor
    open_files: DescriptorBudget
    topic_configs: TopicConfigs
    validate_topic_configs: Callable[[Mapping[str, str]], None]
    """Raises InvalidTopicConfigError for overrides no topic may have."""
    auto_create_topic: Callable[[str], Awaitable[None]]
    """Creates a topic with the broker's defaults (auto.create.topics.enable); in a cluster, returns once it is
    written, before its leaders are elected."""
    groups: GroupService
    txns: TxnService
    fetch_sessions: FetchSessionCache
    features: FeatureStore
    quotas: ClientQuotas
    client_metrics: ClientMetricsManager
    sasl: SaslAuthenticator
    scram_credentials: ScramCredentialStore
    schema_validation: SchemaValidation
    authorizer: Authorizer | None
    """None without authorizer.class.name: every request is allowed."""
    acl_store: AclStore | None
    zk_mode: ZkMode | None
    """The ZooKeeper-mode parts (registration, controller, producer-id blocks); None on a single node."""
    serving: asyncio.Event
    """Set once start-up finished: client requests wait for it, as Kafka processes none before."""
    apis: Mapping[int, ApiRange]
    """The APIs served, by key."""
    share: ShareService
    """Share groups (KIP-932): membership, group configs, share-partitions and share sessions."""
    share_state: ShareStateService
    """The share coordinator: share-partitions' durable state in ``__share_group_state``."""
    metrics: RequestMetrics | None = None
    """None unless metrics.port is set."""
    started_metadata: ClusterMetadata | None = None
    """The cluster's metadata, from the broker's start (None before: see `metadata`)."""

    @property
    def metadata(self) -> ClusterMetadata:
        """The cluster's metadata. A request is handled only once `serving` is set, after the broker's
        start filled it in; anything that may run earlier reads `started_metadata`."""
        if self.started_metadata is None:
            raise RuntimeError("the broker has not started: no cluster metadata yet")
        return self.started_metadata
