"""Seeded fault schedules and how each fault is applied and healed.

A schedule is a list of faults, one at a time, each healed before a quiet gap and the next. Targets
named by role ("leader" of partition 0 of the queue topic, "controller") are resolved when the fault
starts, so the history records which broker it hit.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Any

from chaos.cluster import REPLICA_LAG_MS, SESSION_TIMEOUT_MS, Broker, ChaosCluster
from chaos.history import History
from chaos.workload import QUEUE_TOPIC

# kind -> (targets to choose from, shortest and longest duration in seconds)
KINDS: dict[str, tuple[tuple[str, ...], float, float]] = {
    "kill": (("random", "leader", "controller"), 1.0, 4.0),
    "kill-two": (("random",), 1.0, 3.0),
    "power-loss": (("random", "leader"), 1.0, 3.0),
    # shorter than replica.lag.time.max.ms; between it and the session timeout; longer than both
    "pause-short": (("random", "leader", "controller"), 0.3, 0.8 * min(REPLICA_LAG_MS, SESSION_TIMEOUT_MS) / 1000),
    "pause-lag": (("random", "leader"), 1.2 * REPLICA_LAG_MS / 1000, 0.8 * SESSION_TIMEOUT_MS / 1000),
    "pause-long": (("random", "leader", "controller"), 1.5 * SESSION_TIMEOUT_MS / 1000, 2.0 * SESSION_TIMEOUT_MS / 1000),
    "zk-restart": (("zookeeper",), 1.0, 5.0),
    "isolate": (("random", "leader", "controller"), 2.0, 8.0),  # from the other brokers (not from clients/ZK)
    "zk-cut": (("random", "leader", "controller"), 2.0, 8.0),  # a broker from ZooKeeper
}


@dataclass
class Fault:
    at: float
    kind: str
    target: str
    duration: float

    def describe(self) -> str:
        return f"{self.at:5.1f}s {self.kind}({self.target}) {self.duration:.1f}s"


def schedule(seed: int, duration: float, kinds: list[str] | None = None) -> list[Fault]:
    rng = random.Random(seed)
    names = kinds or list(KINDS)
    faults = []
    at = rng.uniform(2.0, 4.0)
    while True:
        kind = rng.choice(names)
        targets, shortest, longest = KINDS[kind]
        length = round(rng.uniform(shortest, longest), 1)
        if at + length > duration - 3.0:
            return faults
        faults.append(Fault(round(at, 1), kind, rng.choice(targets), length))
        at += length + rng.uniform(3.0, 6.0)


def expected_loss_schedule() -> list[Fault]:
    """Partition 0's follower drops out of the ISR (paused past replica.lag.time.max.ms), then the
    leader and the other follower lose power together: only unsynced data held the acked tail."""
    return [Fault(4.0, "lose-isr", "leader", 6.0)]


def _leader(cluster: ChaosCluster, partition: int = 0) -> int | None:
    meta = cluster.admin().list_topics(QUEUE_TOPIC, timeout=5)
    leader = meta.topics[QUEUE_TOPIC].partitions[partition].leader
    return leader if leader >= 0 else None


def resolve(cluster: ChaosCluster, target: str, rng: random.Random) -> Broker:
    live = [b for b in cluster.brokers if b.alive and not b.paused] or cluster.brokers
    chosen: int | None = None
    try:
        if target == "leader":
            chosen = _leader(cluster)
        elif target == "controller":
            controller = cluster.admin().list_topics(timeout=5).controller_id
            chosen = controller if controller >= 0 else None
    except Exception:  # noqa: BLE001 - no answer: fall back to a random broker, recorded as such
        chosen = None
    if chosen is None or chosen >= len(cluster.brokers):
        return rng.choice(live)
    return cluster.by_id(chosen)


def apply(cluster: ChaosCluster, fault: Fault, history: History, rng: random.Random) -> None:
    """Start `fault`, hold it for its duration, heal it; both ends go to the history."""
    victims: list[Broker] = []
    detail: dict[str, Any] = {}
    if fault.kind != "zk-restart":
        victims = [resolve(cluster, fault.target, rng)]
    if fault.kind == "kill-two":
        victims.append(rng.choice([b for b in cluster.brokers if b is not victims[0]]))
    start = history.add("fault", phase="start", **asdict(fault), brokers=[b.broker_id for b in victims])
    if fault.kind in ("kill", "kill-two"):
        for broker in victims:
            cluster.kill(broker)
        time.sleep(fault.duration)
        for broker in victims:
            cluster.restart(broker)
    elif fault.kind == "power-loss":
        detail["lost_bytes"] = cluster.power_loss(victims[0])
        time.sleep(fault.duration)
        cluster.restart(victims[0])
    elif fault.kind.startswith("pause"):
        cluster.pause(victims[0])
        time.sleep(fault.duration)
        cluster.resume(victims[0])
    elif fault.kind == "zk-restart":
        cluster.restart_zookeeper(fault.duration)
    elif fault.kind == "isolate":
        for other in cluster.brokers:
            if other is not victims[0]:
                cluster.cut(victims[0], other)
        time.sleep(fault.duration)
        cluster.heal_network()
    elif fault.kind == "zk-cut":
        cluster.cut_zookeeper(victims[0])
        time.sleep(fault.duration)
        cluster.heal_network()
    elif fault.kind == "lose-isr":
        detail.update(_lose_isr(cluster, victims[0], fault.duration, history))
    else:
        raise ValueError(f"unknown fault {fault.kind}")
    history.add("fault", phase="end", kind=fault.kind, started=start["t"], **detail)


def _lose_isr(cluster: ChaosCluster, leader: Broker, duration: float, history: History) -> dict[str, Any]:
    # The leader shrinks the ISR through the controller (AlterPartition), so the paused follower must not
    # be the controller: a paused controller leaves the ISR as it is, and nothing acked can be lost.
    controller = cluster.admin().list_topics(timeout=5).controller_id
    followers = sorted((b for b in cluster.brokers if b is not leader), key=lambda b: b.broker_id == controller)
    follower, other = followers[:2]
    cluster.pause(follower)
    time.sleep(1.5 * REPLICA_LAG_MS / 1000)  # out of the ISR, still in ZooKeeper
    history.add("fault-step", step="power-loss", brokers=[leader.broker_id, other.broker_id])
    lost = {f"b{b.broker_id}": cluster.power_loss(b) for b in (leader, other)}
    cluster.resume(follower)
    time.sleep(duration)
    cluster.restart(leader)
    cluster.restart(other)
    return {"lost_bytes": lost, "stale_follower": follower.broker_id}
