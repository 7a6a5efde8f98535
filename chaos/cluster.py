"""ZooKeeper and N brokers on loopback, each broker behind its own proxies (proxy.py), with the
process-level faults: SIGKILL, power loss (disk.py), SIGSTOP/SIGCONT, ZooKeeper restart.

Faults may overlap (faults.py runs each in its own thread), so every fault takes a hold and gives it
back: a broker stays down while any kill or power loss holds it and is started again (without waiting
for it) when the last one ends, stays stopped while any pause holds it, and a link stays cut while any
cut holds it. The brokers run the code under `code_root`: the repository, or a copy of it with a
planted bug (mutants.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from kazoo.client import KazooClient

from confluent_kafka.admin import AdminClient

from chaos.disk import lose_unsynced_writes
from chaos.proxy import CLIENT, Proxy, ProxyHost
from pybroker.zk.paths import decode_partition_state
from tests.cluster.zookeeper import ZooKeeperServer
from tests.ports import restartable_port

REPO = Path(__file__).resolve().parents[1]
CHROOT = "/pybroker"
SESSION_TIMEOUT_MS = 4000
REPLICA_LAG_MS = 2000
SOLE_MEMBER_GRACE_S = 10.0  # for a leader left alone in the ISR to have flushed its log


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
    code_root: Path = REPO
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def name(self) -> str:
        return f"b{self.broker_id}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self) -> None:
        """Start the process without waiting for it (it may wait for ZooKeeper, cut or down)."""
        config = self.data_dir / "server.properties"
        config.write_text(f"broker.id={self.broker_id}\n")
        args = [sys.executable, "-m", "pybroker", "serve", str(config)]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with open(self.data_dir / "broker.log", "ab") as log:
            self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, cwd=self.code_root,
                                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                                                         "PYTHONPATH": str(self.code_root)})
        self.paused = False

    def start(self, timeout: float = 30.0) -> None:
        self.spawn()
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


Link = tuple[Proxy, str]  # a proxy and a source whose connections through it are cut


@dataclass
class ChaosCluster:
    root: Path
    size: int = 3
    broker_defaults: dict[str, str] = field(default_factory=dict)
    code_root: Path = REPO
    # the brokers' listeners, one per broker (drawn at start when not given): bounded_round draws them in the
    # run's process, so that no two rounds of a run, each in a process forked from it, listen on the same ones
    ports: list[int] = field(default_factory=list)
    zookeeper: ZooKeeperServer | None = None
    brokers: list[Broker] = field(default_factory=list)
    proxies: ProxyHost | None = None
    # one lock per resource, so that a slow step (a ZooKeeper start, a kill's wait) holds up no other fault
    _broker_locks: dict[int, threading.RLock] = field(default_factory=dict)
    _zookeeper_lock: threading.Lock = field(default_factory=threading.Lock)
    _cut_lock: threading.Lock = field(default_factory=threading.Lock)
    _down: Counter[int] = field(default_factory=Counter)
    _paused: Counter[int] = field(default_factory=Counter)
    _cuts: Counter[Link] = field(default_factory=Counter)
    _zookeeper_down: int = 0
    killed_at: dict[int, float] = field(default_factory=dict)  # broker id -> time.time() of its last kill or power loss

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.front.port}" for b in self.brokers)

    def pids(self) -> dict[str, int]:
        return {b.name: b.process.pid for b in self.brokers if b.process is not None}

    def broker_pid(self, broker_id: int) -> int | None:
        return self.pids().get(f"b{broker_id}")

    def zookeeper_pid(self) -> int | None:
        process = self.zookeeper.process if self.zookeeper is not None else None
        return process.pid if process is not None else None

    def start(self) -> None:
        self.proxies = ProxyHost()
        self.zookeeper = ZooKeeperServer(self.root / "zookeeper").start()
        self.ports = self.ports or [restartable_port() for _ in range(self.size)]  # each broker's after every kill
        for broker_id, port in zip(range(self.size), self.ports, strict=True):
            data_dir = self.root / f"broker-{broker_id}"
            data_dir.mkdir(parents=True)
            front = self.proxies.add(Proxy(f"b{broker_id}", self.pids, partial(self.broker_pid, broker_id)))
            zk = self.proxies.add(Proxy(f"zk<-b{broker_id}", self.pids, self.zookeeper_pid))
            zk.target_port = self.zookeeper.port
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
            self.brokers.append(Broker(broker_id, data_dir, port, front, zk, overrides, self.code_root))
            self._broker_locks[broker_id] = threading.RLock()
        for broker in self.brokers:
            broker.start()
        wait_for(lambda: len(self.admin().list_topics(timeout=5).brokers) == self.size,
                 "every broker to register", 60)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000, "log_level": 3})

    def by_id(self, broker_id: int) -> Broker:
        return self.brokers[broker_id]

    def zk_client(self) -> KazooClient:
        """The harness's own ZooKeeper session (chroot), for scenarios that act on znodes; stop it after use."""
        assert self.zookeeper is not None
        client = KazooClient(f"{self.zookeeper.connect}{CHROOT}", timeout=10)
        try:
            client.start(10)
        except Exception:
            client.stop()  # a client that could not connect keeps trying in its own threads otherwise
            client.close()
            raise
        return client

    def controller(self) -> int | None:
        """The controller's id as /controller names it (None between controllers)."""
        client = self.zk_client()
        try:
            data, _ = client.get("/controller")
            return int(json.loads(data)["brokerid"])
        except Exception:  # noqa: BLE001 - no controller right now
            return None
        finally:
            client.stop()
            client.close()

    def isrs(self) -> tuple[dict[str, tuple[list[int], float, bool]], dict[int, float]]:
        """Every partition's ISR as its state znode holds it (what the controller elects from), when that
        znode was last written and whether it waits for a longest-log election (its members are then only
        candidates), and when each registered broker registered (seconds since the epoch)."""
        client = self.zk_client()
        try:
            states = {}
            for topic in client.get_children("/brokers/topics"):
                for partition in client.get_children(f"/brokers/topics/{topic}/partitions"):
                    data, stat = client.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
                    state = decode_partition_state(data, stat.version)
                    states[f"{topic}-{partition}"] = (list(state.isr), stat.mtime / 1000, state.elect_longest_log)
            registered = {int(b): client.get(f"/brokers/ids/{b}")[1].ctime / 1000
                          for b in client.get_children("/brokers/ids")}
            return states, registered
        finally:
            client.stop()
            client.close()

    def power_loss_risk(self, victims: list[Broker]) -> str | None:
        """Why powering off `victims` now could lose acknowledged records by design, in Kafka too (neither
        fsyncs before acknowledging), or None. A partition is safe when an ISR member outside the victims
        holds its records and will stay in the ISR: one that runs (a broker killed or stopped now is taken out
        of the ISR when it comes back or its session expires), whose registration is older than the ISR's
        last write, and which has not been killed since it registered (a broker back from a power loss may
        still be named in an ISR rewritten for another reason before the controller handled its restart; one
        killed and started again still has its dead process's registration until that session expires, and
        the controller then handles it as restarted: round 3015 powered off the other two ISR members of
        every partition then, and they led again with their cut logs), or when its only ISR
        member has been that for SOLE_MEMBER_GRACE_S: a leader left alone in the ISR flushes its log (README),
        and a power loss after that is what the harness must be able to survive. Only if that member too was
        registered before the ISR was written and not killed since: one started again came back with what it
        had not flushed still unflushed, and not as the leader that flushed (round 3017 with the fixes:
        queue-4's only member, whose session had expired and which was then killed and started again, lost
        power with its whole log above its recovery point, and the intact follower outside the ISR truncated
        to it).

        A state waiting for a longest-log election is written after its members registered, but names them
        only as candidates: every member restarted, and which kept the records only their logs can tell, so
        none may lose power (round 8103: brokers 1 and 2 lost their logs with their power, broker 0 was
        killed, the failover wrote ISR [2, 0, 1] waiting, and broker 0, the only one with the records, was
        powered off as if brokers 1 and 2 held them)."""
        names = {b.broker_id for b in victims}
        now = time.time()
        states, registered = self.isrs()
        running = {b.broker_id for b in self.brokers if b.alive and not b.paused}

        def member_since(broker: int, written: float) -> bool:
            """Registered before the ISR was written, and not killed since it registered."""
            since = registered.get(broker)
            return since is not None and self.killed_at.get(broker, 0.0) < since < written

        for name, (isr, written, waiting) in sorted(states.items()):
            if waiting:
                if names & set(isr):
                    return f"{name}: ISR {isr} waits for a longest-log election"
                continue
            holders = [b for b in isr if b not in names and b in running and member_since(b, written)]
            if holders:
                continue
            if len(isr) == 1 and isr[0] in names and now - written >= SOLE_MEMBER_GRACE_S \
                    and member_since(isr[0], written):
                continue
            return f"{name}: ISR {isr} written {now - written:.1f} s ago"
        return None

    # -- process faults: holds --------------------------------------------------------------------

    def take_down(self, broker: Broker, power_loss: bool = False) -> dict[str, int]:
        """SIGKILL (the first hold); with `power_loss`, also lose what the disk had not fsynced (even if
        another hold had it down already: the page cache goes with the power). Bytes cut per partition."""
        with self._broker_locks[broker.broker_id]:
            self._down[broker.broker_id] += 1
            if self._down[broker.broker_id] == 1:
                self.kill(broker)
            if not power_loss:
                return {}
            self.killed_at[broker.broker_id] = time.time()  # the page cache goes now, whenever the process went
            return lose_unsynced_writes(broker.data_dir / "logs")

    def bring_up(self, broker: Broker) -> None:
        """Give a down hold back; the last one starts the broker again, without waiting for it."""
        with self._broker_locks[broker.broker_id]:
            self._down[broker.broker_id] -= 1
            if self._down[broker.broker_id] == 0 and not broker.alive:
                broker.process = None
                broker.spawn()
                if self._paused[broker.broker_id]:
                    self.pause(broker)

    def hold_paused(self, broker: Broker) -> None:
        with self._broker_locks[broker.broker_id]:
            self._paused[broker.broker_id] += 1
            if self._paused[broker.broker_id] == 1:
                self.pause(broker)

    def release_paused(self, broker: Broker) -> None:
        with self._broker_locks[broker.broker_id]:
            self._paused[broker.broker_id] -= 1
            if self._paused[broker.broker_id] == 0:
                self.resume(broker)

    def take_zookeeper_down(self) -> None:
        with self._zookeeper_lock:
            self._zookeeper_down += 1
            if self._zookeeper_down == 1:
                assert self.zookeeper is not None and self.proxies is not None
                self.zookeeper.stop()
                for broker in self.brokers:
                    self.proxies.call(broker.zk.reset)

    def bring_zookeeper_up(self) -> None:
        with self._zookeeper_lock:
            self._zookeeper_down -= 1
            if self._zookeeper_down == 0:
                self._start_zookeeper()

    def _start_zookeeper(self) -> None:
        """Start ZooKeeper again; on another port if its own was taken meanwhile, which the proxies then
        forward to (they forward only to ZooKeeper's process, so they would otherwise refuse every connection)."""
        assert self.zookeeper is not None
        self.zookeeper.start()
        for broker in self.brokers:
            broker.zk.target_port = self.zookeeper.port

    def kill(self, broker: Broker) -> None:
        self.killed_at[broker.broker_id] = time.time()
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

    # -- network faults: cut links ----------------------------------------------------------------

    @staticmethod
    def between(a: Broker, b: Broker) -> list[Link]:
        """Both directions between two brokers."""
        return [(a.front, b.name), (b.front, a.name)]

    def connections_into(self, broker: Broker) -> dict[str, int]:
        """The connections open to `broker` now, counted by the source its proxy took each for: what a cut
        of one source can freeze (a post-mortem of a fault whose cut seemed to have no effect)."""
        assert self.proxies is not None
        counted: Counter[str] = Counter()
        self.proxies.call(lambda: counted.update(link.source for link in broker.front.links))
        return dict(counted)

    @staticmethod
    def into(broker: Broker, source: Broker) -> list[Link]:
        """The connections `source` opens to `broker` (a follower's fetches from its leader), not the others."""
        return [(broker.front, source.name)]

    @staticmethod
    def from_zookeeper(broker: Broker) -> list[Link]:
        return [(broker.zk, "*")]

    @staticmethod
    def from_clients(broker: Broker) -> list[Link]:
        """Every connection to the broker that no broker opened: the workload's clients (and the harness's)."""
        return [(broker.front, CLIENT)]

    def isolation(self, victim: Broker) -> list[Link]:
        """The victim cut from every other broker (not from clients or ZooKeeper)."""
        return [link for other in self.brokers if other is not victim for link in self.between(victim, other)]

    def cut(self, links: list[Link]) -> None:
        self._change_cuts(links, +1)

    def uncut(self, links: list[Link]) -> None:
        self._change_cuts(links, -1)

    def _change_cuts(self, links: list[Link], delta: int) -> None:
        assert self.proxies is not None
        with self._cut_lock:
            self._cuts.update({link: delta for link in links})
            for proxy in {proxy for proxy, _ in links}:
                blocked = {source for (p, source), holds in self._cuts.items() if p is proxy and holds > 0}
                self.proxies.call(partial(proxy.block, blocked))

    def heal(self) -> None:
        """Everything back: network healed, paused brokers resumed, dead brokers and ZooKeeper restarted
        (every fault's hold has normally been given back already; this clears what an error left)."""
        assert self.zookeeper is not None and self.proxies is not None
        with self._cut_lock:
            self._cuts.clear()
            for proxy in self.proxies.proxies:
                self.proxies.call(partial(proxy.block, set()))
        with self._zookeeper_lock:
            self._zookeeper_down = 0
            if self.zookeeper.process is None:
                self._start_zookeeper()
        for broker in self.brokers:
            with self._broker_locks[broker.broker_id]:
                self._down[broker.broker_id] = self._paused[broker.broker_id] = 0
                if broker.paused:
                    self.resume(broker)
                if not broker.alive:
                    broker.process = None
                    broker.spawn()

    def revive(self) -> list[int]:
        """After the heal, start again every broker whose process has exited; their ids. A broker started
        while cut from ZooKeeper gives up after zookeeper.connection.timeout.ms and exits, as Kafka's does,
        and may do so just after the heal looked (round 3004: 'broker 1 not registered' for 120 s)."""
        started = []
        for broker in self.brokers:
            with self._broker_locks[broker.broker_id]:
                if not broker.alive and not self._down[broker.broker_id]:
                    broker.process = None
                    broker.spawn()
                    started.append(broker.broker_id)
        return started

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
            self.proxies = None
