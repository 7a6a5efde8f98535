"""Several pybrokers registered in a real ZooKeeper: replication, leader election and failover in tests.

``with EmbeddedCluster(brokers=3) as cluster``: ZooKeeper (Debian's `zookeeper` package; a clear error
when it is missing) and brokers 0..n-1 in one temporary directory, every broker knowing every other
before the block starts. ``kill(broker_id)`` crashes one, ``leader(topic, partition)`` says who leads.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from pybroker.testing.embedded import (
    BrokerNode,
    EmbeddedBrokerError,
    create_topic_async,
    kafka_config,
    leader_async,
    run_sync,
)
from pybroker.testing.zookeeper import ZooKeeperServer, check_installed

CHROOT = "/pybroker"
_OPEN: set[EmbeddedCluster] = set()


@atexit.register
def _close_forgotten() -> None:
    """A cluster the test never closed: its processes killed and its directory removed at exit."""
    for cluster in list(_OPEN):
        cluster.close()


def cluster_defaults(brokers: int) -> dict[str, str]:
    """Failover in seconds rather than Kafka's defaults (a dead broker's session expires after 4 s)."""
    replicas = str(min(3, brokers))
    return {"zookeeper.session.timeout.ms": "4000", "replica.fetch.backoff.ms": "100",
            "replica.lag.time.max.ms": "10000", "leader.imbalance.check.interval.seconds": "2",
            "controlled.shutdown.retry.backoff.ms": "500", "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3", "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": str(min(2, brokers)),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


class EmbeddedCluster:
    """ZooKeeper plus ``brokers`` pybrokers (ids 0..n-1) on loopback ports, in one temporary directory."""

    def __init__(self, brokers: int = 3, config: Mapping[str, Any] | None = None, *,
                 start_timeout: float = 60.0, tmp_dir: str | Path | None = None, schema_registry: bool = False,
                 **overrides: Any) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.size = brokers
        self.config = {**cluster_defaults(brokers), **kafka_config(config, overrides)}
        if schema_registry:
            self.config.setdefault("schema.registry.listeners", "http://127.0.0.1:0")
        self.start_timeout = start_timeout
        self._tmp_root = tmp_dir
        self.root: Path | None = None
        self.zookeeper: ZooKeeperServer | None = None
        self.brokers: dict[int, BrokerNode] = {}

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def bootstrap_servers(self) -> str:
        """The running brokers' addresses, comma-separated."""
        running = [node.bootstrap_servers for node in self.brokers.values() if node.running]
        if not running:
            raise EmbeddedBrokerError("no broker of the cluster is running")
        return ",".join(running)

    def start(self) -> EmbeddedCluster:
        check_installed()
        try:
            self.root = Path(tempfile.mkdtemp(prefix="pybroker-cluster-", dir=self._tmp_root))
        except OSError as exc:
            where = self._tmp_root or tempfile.gettempdir()
            raise EmbeddedBrokerError(f"cannot create the cluster's temporary directory in {where}: {exc}") from None
        _OPEN.add(self)
        try:
            self.zookeeper = ZooKeeperServer(self.root / "zookeeper").start()
            config = {"zookeeper.connect": self.zookeeper.connect + CHROOT, **self.config}
            for broker_id in range(self.size):
                self.brokers[broker_id] = BrokerNode(config, data_dir=self.root / f"broker-{broker_id}",
                                                     host="127.0.0.1", port=0, broker_id=broker_id)
            self._start_nodes(list(self.brokers.values()))
        except BaseException:
            self.close()
            raise
        return self

    def _start_nodes(self, nodes: list[BrokerNode]) -> None:
        children = [node.spawn() for node in nodes]  # in parallel: each start is mostly imports
        deadline = time.monotonic() + self.start_timeout
        for node, child in zip(nodes, children):
            child.wait_ready(max(0.0, deadline - time.monotonic()))
            node.finish_start()
        self._wait_for_membership(deadline)

    def _wait_for_membership(self, deadline: float) -> None:
        from pybroker.client.admin import AdminClient
        from pybroker.client.cluster import KafkaClient

        running = {broker_id for broker_id, node in self.brokers.items() if node.running}

        async def known(node: BrokerNode) -> set[int]:
            async with KafkaClient(node.bootstrap_servers, client_id="pybroker-testing", timeout=5.0) as client:
                return {b.node_id for b in await AdminClient(client).describe_cluster()}

        for node in self.brokers.values():
            while node.running and run_sync(lambda: known(node)) != running:
                if time.monotonic() > deadline:
                    raise EmbeddedBrokerError(f"broker {node.broker_id} did not see brokers {sorted(running)} "
                                              f"within {self.start_timeout} s:\n{node.log_tail(20)}")
                time.sleep(0.05)

    @property
    def schema_registry_url(self) -> str:
        """The running brokers' registry URLs, comma-separated as SchemaRegistryClient takes them
        (``schema_registry=True``): any of them serves reads, and forwards writes to the leader's."""
        urls = [node.schema_registry_url for node in self.brokers.values()
                if node.running and node.schema_registry_url is not None]
        if not urls:
            raise EmbeddedBrokerError("the cluster serves no schema registry: start it with schema_registry=True")
        return ",".join(urls)

    def kill(self, broker_id: int) -> None:
        """SIGKILL one broker: its ZooKeeper session expires within seconds and leadership moves on."""
        self._node(broker_id).kill()

    def stop(self, broker_id: int) -> None:
        """A controlled shutdown of one broker (SIGTERM): it hands over its leaderships first."""
        self._node(broker_id).stop()

    def restart(self, broker_id: int) -> None:
        """Starts a stopped or killed broker again on its data and port, and waits until all see it."""
        node = self._node(broker_id)
        node.stop()
        self._start_nodes([node])

    def leader(self, topic: str, partition: int = 0) -> int | None:
        """The id of the partition's leader as the cluster's metadata says now (None: no leader)."""
        bootstrap = self.bootstrap_servers
        return run_sync(lambda: leader_async(bootstrap, topic, partition))

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None, *,
                     replication_factor: int | None = None) -> str:
        """Replicated on ``min(3, brokers)`` brokers unless ``replication_factor`` says otherwise."""
        factor = replication_factor if replication_factor is not None else min(3, self.size)
        bootstrap = self.bootstrap_servers
        return run_sync(lambda: create_topic_async(bootstrap, name, partitions, factor, config))

    def log_tail(self, broker_id: int, lines: int = 50) -> str:
        return self._node(broker_id).log_tail(lines)

    def close(self) -> None:
        for node in self.brokers.values():
            node.kill()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        _OPEN.discard(self)

    def _node(self, broker_id: int) -> BrokerNode:
        try:
            return self.brokers[broker_id]
        except KeyError:
            raise EmbeddedBrokerError(f"the cluster has no broker {broker_id} (ids 0..{self.size - 1})") from None
