"""W6's cluster: a real ZooKeeper, started by the cluster tests' own helper, and three pybrokers."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from benchmarks.brokers import PyBroker
from tests.cluster.zookeeper import ZooKeeperServer

BROKERS = 3
CHROOT = "/pybroker"


@contextmanager
def running_cluster(scratch: Path, timeout: float) -> Iterator[str]:
    """ZooKeeper and brokers 0-2 in the chroot /pybroker; yields the bootstrap list of all three."""
    with running_brokers(scratch, timeout) as brokers:
        yield ",".join(broker.bootstrap for broker in brokers)


@contextmanager
def running_brokers(scratch: Path, timeout: float, open_files: int | None = None) -> Iterator[list[PyBroker]]:
    """ZooKeeper and brokers 0-2 in the chroot /pybroker (each with `open_files` as its RLIMIT_NOFILE, if
    given); yields the brokers, which the caller may stop, kill and start again."""
    root = Path(tempfile.mkdtemp(prefix="cluster-", dir=scratch))
    try:
        with ExitStack() as stack:
            zookeeper = ZooKeeperServer(root / "zookeeper").start(timeout)
            stack.callback(zookeeper.stop)
            brokers = []
            for broker_id in range(BROKERS):
                workdir = root / f"broker-{broker_id}"
                workdir.mkdir()
                broker = PyBroker(workdir, {"broker.id": str(broker_id),
                                            "zookeeper.connect": zookeeper.connect + CHROOT})
                broker.open_files = open_files
                stack.callback(broker.stop)
                broker.start(timeout)
                brokers.append(broker)
            yield brokers
    finally:
        shutil.rmtree(root, ignore_errors=True)
