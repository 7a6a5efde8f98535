"""ZooKeeper and N brokers on loopback, each broker behind its own proxies (proxy.py), with the
process-level faults: SIGKILL, power loss (disk.py), SIGSTOP/SIGCONT, ZooKeeper restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from chaos.disk import lose_unsynced_writes
from chaos.proxy import Proxy, ProxyHost
from tests.cluster.zookeeper import ZooKeeperServer

REPO = Path(__file__).resolve().parents[1]
CHROOT = "/pybroker"
SESSION_TIMEOUT_MS = 4000
REPLICA_LAG_MS = 2000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition, what: str, timeout: float, interval: float = 0.2) -> None:
    """Poll `condition` until true; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - a cluster in flux answers with errors; keep polling
            pass
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False


@dataclass
class Broker:
    """One `pybroker serve` in its own process group; stderr appends to <data_dir>/broker.log."""
    broker_id: int
    data_dir: Path
    port: int
    front: Proxy  # what every client and peer dials (advertised.listeners)
    zk: Proxy  # this broker's way to ZooKeeper
    overrides: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def name(self) -> str:
        return f"b{self.broker_id}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        config = self.data_dir / "server.properties"
        config.write_text(f"broker.id={self.broker_id}\n")
        args = [sys.executable, "-m", "pybroker", "serve", str(config)]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with open(self.data_dir / "broker.log", "ab") as log:
            self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, cwd=REPO,
                                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.paused = False
        wait_for(lambda: self.process is not None and self.process.poll() is None and port_open(self.port),
                 f"broker {self.broker_id} to listen", timeout, 0.1)

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        if self.process is None:
            return
        self.signal(signal.SIGKILL)
        self.process.wait(30)
        self.process = None
        self.paused = False


@dataclass
class ChaosCluster:
    root: Path
    size: int = 3
    broker_defaults: dict[str, str] = field(default_factory=dict)
    zookeeper: ZooKeeperServer | None = None
    brokers: list[Broker] = field(default_factory=list)
    proxies: ProxyHost | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.front.port}" for b in self.brokers)

    def pids(self) -> dict[str, int]:
        return {b.name: b.process.pid for b in self.brokers if b.process is not None}

    def start(self) -> None:
        self.proxies = ProxyHost()
        self.zookeeper = ZooKeeperServer(self.root / "zookeeper").start()
        for broker_id in range(self.size):
            data_dir = self.root / f"broker-{broker_id}"
            data_dir.mkdir(parents=True)
            front = self.proxies.add(Proxy(f"b{broker_id}", self.pids))
            zk = self.proxies.add(Proxy(f"zk<-b{broker_id}", self.pids))
            zk.target_port = self.zookeeper.port
            port = free_port()
            front.target_port = port
            overrides = {
                "broker.id": str(broker_id), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{front.port}",
                "log.dirs": str(data_dir / "logs"), "zookeeper.connect": f"127.0.0.1:{zk.port}{CHROOT}",
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "replica.lag.time.max.ms": str(REPLICA_LAG_MS), "replica.fetch.backoff.ms": "100",
                "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",
                "transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "3",
                "transaction.state.log.min.isr": "2", "group.initial.rebalance.delay.ms": "0",
                "leader.imbalance.check.interval.seconds": "5", "metrics.port": "-1",
                "log.flush.offset.checkpoint.interval.ms": "1000", "default.replication.factor": "3",
                "min.insync.replicas": "2", "auto.create.topics.enable": "false",
                **self.broker_defaults}
            self.brokers.append(Broker(broker_id, data_dir, port, front, zk, overrides))
        for broker in self.brokers:
            broker.start()
        wait_for(lambda: len(self.admin().list_topics(timeout=5).brokers) == self.size,
                 "every broker to register", 60)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000, "log_level": 3})

    def by_id(self, broker_id: int) -> Broker:
        return self.brokers[broker_id]

    # -- process faults ---------------------------------------------------------------------------

    def kill(self, broker: Broker) -> None:
        broker.kill()
        assert self.proxies is not None
        self.proxies.call(broker.front.reset)
        self.proxies.call(broker.zk.reset)

    def power_loss(self, broker: Broker) -> dict[str, int]:
        """SIGKILL, then lose what the disk had not fsynced; returns bytes cut per partition."""
        self.kill(broker)
        return lose_unsynced_writes(broker.data_dir / "logs")

    def restart(self, broker: Broker) -> None:
        if not broker.alive:
            broker.process = None
            broker.start()

    def pause(self, broker: Broker) -> None:
        broker.signal(signal.SIGSTOP)
        broker.paused = True

    def resume(self, broker: Broker) -> None:
        broker.signal(signal.SIGCONT)
        broker.paused = False

    def restart_zookeeper(self, down_for: float) -> None:
        assert self.zookeeper is not None and self.proxies is not None
        self.zookeeper.stop()
        for broker in self.brokers:
            self.proxies.call(broker.zk.reset)
        time.sleep(down_for)
        self.zookeeper.start()

    # -- network faults ---------------------------------------------------------------------------

    def cut(self, a: Broker, b: Broker) -> None:
        """Both directions between two brokers."""
        assert self.proxies is not None
        self.proxies.call(lambda: a.front.cut({b.name}))
        self.proxies.call(lambda: b.front.cut({a.name}))

    def cut_zookeeper(self, broker: Broker) -> None:
        assert self.proxies is not None
        self.proxies.call(lambda: broker.zk.cut({"*"}))

    def heal_network(self) -> None:
        assert self.proxies is not None
        for proxy in self.proxies.proxies:
            self.proxies.call(proxy.heal)

    def heal(self) -> None:
        """Everything back: network healed, paused brokers resumed, dead brokers and ZooKeeper restarted."""
        self.heal_network()
        assert self.zookeeper is not None
        if self.zookeeper.process is None:
            self.zookeeper.start()
        for broker in self.brokers:
            if broker.paused:
                self.resume(broker)
            self.restart(broker)

    def stop(self) -> None:
        """Kill everything, even half-started; never raises."""
        for broker in self.brokers:
            try:
                broker.kill()
            except Exception:  # noqa: BLE001 - teardown must reach ZooKeeper and the proxies
                pass
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self.proxies is not None:
            self.proxies.close()
