from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tests.eventually import eventually
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess

CHROOT = "/pybroker"
BROKERS = 3
# Short enough that a SIGKILLed broker's session (and its /brokers/ids znode) expires within seconds.
SESSION_TIMEOUT_MS = 4000
POST_MORTEM_LINES = 60


@dataclass
class Cluster:
    zookeeper: ZooKeeperServer
    brokers: list[BrokerProcess]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.process is not None)

    @property
    def zk_connect(self) -> str:
        return self.zookeeper.connect + CHROOT


def broker_overrides(broker_id: int, zk_connect: str) -> dict[str, str]:
    return {"broker.id": str(broker_id), "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), "offsets.topic.num.partitions": "3",
            "replica.fetch.backoff.ms": "100",
            "replica.lag.time.max.ms": "10000", "leader.imbalance.check.interval.seconds": "2",
            "controlled.shutdown.retry.backoff.ms": "500", "metrics.port": "0",
            "transaction.state.log.num.partitions": "3",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@contextmanager
def running_cluster(root: Path, brokers: int = BROKERS, extra: dict[str, str] | None = None,
                    open_files: dict[int, int] | None = None) -> Iterator[Cluster]:
    """ZooKeeper and ``brokers`` brokers (ids from 0) in the chroot /pybroker, each with ``extra`` overrides
    (and the RLIMIT_NOFILE ``open_files`` gives it, if any); every broker knows every other before this
    yields, and each one's log is kept for post-mortems."""
    zookeeper = ZooKeeperServer(root / "zookeeper").start()
    processes: list[BrokerProcess] = []
    try:
        for broker_id in range(brokers):
            data_dir = root / f"broker-{broker_id}"
            data_dir.mkdir()
            overrides = {**broker_overrides(broker_id, zookeeper.connect + CHROOT), **(extra or {})}
            processes.append(BrokerProcess(data_dir, overrides,
                                           open_files=(open_files or {}).get(broker_id)).start())
        for broker in processes:
            eventually(lambda: len(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(
                timeout=10).brokers) == brokers, f"broker {broker.port} to know all brokers")
        yield Cluster(zookeeper, processes)
    except BaseException:
        for broker in processes:  # the post-mortem a CI log keeps: the temporary directory is gone with the run
            print(f"--- last lines of broker {broker.overrides['broker.id']} (port {broker.port}) ---")
            print("\n".join(broker.log_lines[-POST_MORTEM_LINES:]))
        raise
    finally:
        for broker in processes:
            broker.kill()
            (broker.data_dir / "broker.log").write_text(broker.log_text())
        zookeeper.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """ZooKeeper and three brokers (ids 0-2) in the chroot /pybroker, shared by a module's tests."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running
