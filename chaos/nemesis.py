"""Applies a fault schedule (faults.py): each fault in a thread of its own, so faults overlap as
scheduled; each takes its holds on brokers, links and ZooKeeper from the cluster and gives them back
(cluster.py), and writes its start, steps and end to the history."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import asdict
from typing import Any, Callable

from confluent_kafka import Producer
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from chaos.cluster import Broker, ChaosCluster, Link
from chaos.faults import SHARE_LEADER_DOWN_S, Fault
from chaos.history import History
from chaos.replicas import log_end
from chaos import share_aim
from chaos.workload import QUEUE_TOPIC

REGISTER_WAIT_S = 30.0
ACKED_AFTER_SHRINK = 20  # lose-isr: records the two ISR members left take before they lose power
OVERTAKE_WAIT_S = 20.0  # lag-then-isolate: how long the cut may outlast its duration for a new leader to write
TAIL_RECORDS = 5  # lag-then-isolate: records only the isolated leader holds
# How long a lag-then-* fault (and lose-isr) waits for its follower to leave the ISR, and lose-isr for acks
# after that: 6 s (faults.LAG_WAIT_S) was too short with the machine loaded (the two-mutant smoke round of
# elect-outside-isr saw its follower still in the ISR and powered off the leader with nothing to lose).
LAG_TIMEOUT_S = 15.0
# How long share-stall-then-kill waits for a share-partition to aim at (share_aim.py): the members' first
# records came more than 15 s into a loaded round (seed 11 in CI found none then, and said nothing).
SHARE_AIM_WAIT_S = 30.0
SHARE_MOVE_AFTER_S = 10.0  # after which a leader is moved though some share-partition is not read yet
SHARE_READ_WAIT_S = 10.0  # for the members to read a moved share-partition from its new leader


class Nemesis:
    def __init__(self, cluster: ChaosCluster, history: History, seed: int) -> None:
        self.cluster = cluster
        self.history = history
        self.seed = seed
        self.threads: list[threading.Thread] = []

    def start(self, plan: list[Fault]) -> None:
        for index, fault in enumerate(plan):
            rng = random.Random(self.seed * 1000 + index)
            thread = threading.Thread(target=self._run, args=(index, fault, rng), name=f"fault-{index}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def join(self, timeout: float) -> list[str]:
        """Wait for every fault to end; the names of those still holding after `timeout`."""
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]

    def _run(self, index: int, fault: Fault, rng: random.Random) -> None:
        time.sleep(max(0.0, fault.at - self.history.now()))
        try:
            apply(self.cluster, fault, self.history, rng, index)
        except Exception as exc:  # noqa: BLE001 - a fault that cannot be applied is recorded, not fatal
            self.history.add("fault-error", id=index, kind=fault.kind, error=f"{type(exc).__name__}: {exc}")


# -- targets --------------------------------------------------------------------------------------

def partition_state(cluster: ChaosCluster, partition: int,
                    topic: str = QUEUE_TOPIC) -> tuple[int, list[int], list[int]]:
    """(leader, replicas in assignment order, ISR) of a partition, as the metadata says now (asked again for
    up to 5 s while the broker answering does not know the partition)."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            meta = cluster.admin().list_topics(topic, timeout=5).topics[topic].partitions[partition]
            return meta.leader, list(meta.replicas), list(meta.isrs)
        except KeyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def resolve(cluster: ChaosCluster, target: str, rng: random.Random, partition: int | None = None) -> Broker:
    """A role to a broker; a random live one when the cluster cannot say (recorded as whoever it is)."""
    live = [b for b in cluster.brokers if b.alive and not b.paused] or cluster.brokers
    chosen: int | None = None
    try:
        if target == "leader":
            chosen = partition_state(cluster, partition or 0)[0]
        elif target == "preferred":
            chosen = partition_state(cluster, partition or 0)[1][0]
        elif target == "controller":
            chosen = cluster.controller()
    except Exception:  # noqa: BLE001 - no answer: fall back to a random broker
        chosen = None
    if chosen is None or not 0 <= chosen < len(cluster.brokers):
        return rng.choice(live)
    return cluster.by_id(chosen)


def _other(cluster: ChaosCluster, rng: random.Random, *exclude: Broker) -> Broker:
    return rng.choice([b for b in cluster.brokers if b not in exclude])


# -- applying -------------------------------------------------------------------------------------

def apply(cluster: ChaosCluster, fault: Fault, history: History, rng: random.Random, index: int = 0) -> None:
    """Start `fault`, hold it for its duration, give it back; both ends go to the history."""
    step = _Steps(history, index)
    victims: list[Broker] = [] if fault.kind in ("zk-restart", "share-stall-then-kill") \
        else [resolve(cluster, fault.target, rng, fault.partition)]
    if fault.kind in ("kill-two", "net-and-zk"):
        victims.append(_other(cluster, rng, victims[0]))
    start = history.add("fault", phase="start", id=index, **asdict(fault), brokers=[b.broker_id for b in victims])
    detail: dict[str, Any] = {}
    kind, hold = fault.kind, fault.duration
    if kind in ("kill", "kill-two", "power-loss"):
        detail["lost_bytes"] = _take_down(cluster, victims, kind == "power-loss", step)
        time.sleep(hold)
        for victim in victims:
            cluster.bring_up(victim)
    elif kind.startswith("pause"):
        cluster.hold_paused(victims[0])
        time.sleep(hold)
        cluster.release_paused(victims[0])
    elif kind == "zk-restart":
        cluster.take_zookeeper_down()
        time.sleep(hold)
        cluster.bring_zookeeper_up()
    elif kind in ("isolate", "zk-cut", "clients-cut", "net-and-zk"):
        links = {"isolate": cluster.isolation, "zk-cut": cluster.from_zookeeper,
                 "clients-cut": cluster.from_clients}.get(kind, lambda v: [])(victims[0])
        if kind == "net-and-zk":
            third = rng.choice(cluster.brokers)
            links = cluster.between(victims[0], victims[1]) + cluster.from_zookeeper(third)
            detail["zk_cut"] = third.broker_id
        _held_cut(cluster, links, hold)
    elif kind == "failover-mid":
        detail.update(_failover_mid(cluster, victims[0], hold, step))
    elif kind.startswith("lag-then-"):
        detail.update(_lag_then(cluster, fault, victims[0], step))
    elif kind == "power-loss-two":
        detail.update(_power_loss_two(cluster, hold, step))
    elif kind == "controller-bounce":
        detail.update(_controller_bounce(cluster, fault, victims[0], step))
    elif kind == "lose-isr":
        detail.update(_lose_isr(cluster, victims[0], hold, history))
    elif kind == "share-stall-then-kill":
        detail.update(_share_stall_then_kill(cluster, hold, rng, step, history))
    else:
        raise ValueError(f"unknown fault {kind}")
    history.add("fault", phase="end", id=index, kind=kind, started=start["t"], **detail)


class _Steps:
    def __init__(self, history: History, index: int) -> None:
        self.history, self.index = history, index

    def __call__(self, step: str, **fields: Any) -> None:
        self.history.add("fault-step", id=self.index, step=step, **fields)


def _held_cut(cluster: ChaosCluster, links: list[Link], hold: float) -> None:
    cluster.cut(links)
    try:
        time.sleep(hold)
    finally:
        cluster.uncut(links)


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except Exception:  # noqa: BLE001 - a cluster in flux answers with errors; ask again
            pass
        time.sleep(0.2)
    return False


def _failover_mid(cluster: ChaosCluster, leader: Broker, hold: float, step: _Steps) -> dict[str, Any]:
    """The leader killed; halfway, the controller then (the new one, if the leader was it)."""
    cluster.take_down(leader)
    time.sleep(hold / 2)
    controller = cluster.controller()
    second = cluster.by_id(controller) if controller is not None and controller != leader.broker_id else None
    if second is not None:
        step("kill-controller", broker=second.broker_id)
        cluster.take_down(second)
    time.sleep(hold / 2)
    cluster.bring_up(leader)
    if second is not None:
        cluster.bring_up(second)
    return {"controller": None if second is None else second.broker_id}


def _lag_then(cluster: ChaosCluster, fault: Fault, leader: Broker, step: _Steps) -> dict[str, Any]:
    """The first replica of the assignment other than the leader stops fetching from it (its connections
    into the leader frozen, so the leader's AlterPartition still reaches a controller it may be) until it
    leaves the ISR; then the leader goes, killed, powered off or cut from brokers and ZooKeeper: cut, it
    takes a tail that no other replica can hold (`_write_tail`), and after the fault's duration it is cut
    from the clients too until another broker leads and has written past it (`_overtaken`)."""
    partition = fault.partition or 0
    _, replicas, _ = partition_state(cluster, partition)
    follower = cluster.by_id(next(r for r in replicas if r != leader.broker_id))
    lag = cluster.into(leader, follower)
    cluster.cut(lag)
    try:
        left = _wait(lambda: follower.broker_id not in partition_state(cluster, partition)[2], LAG_TIMEOUT_S)
        if left:
            step("lagging", follower=follower.broker_id, leader=leader.broker_id)
        else:  # which sources the leader's connections were taken for: a follower's never cut reads as "client"
            step("still-in-isr", follower=follower.broker_id, leader=leader.broker_id,
                 connections=cluster.connections_into(leader))
        detail: dict[str, Any] = {"follower": follower.broker_id, "left_isr": left}
        how = fault.kind.removeprefix("lag-then-")
        if how == "isolate":
            cut = cluster.isolation(leader) + cluster.from_zookeeper(leader)
            cluster.cut(cut)
            try:
                detail["tail"] = _write_tail(leader, partition, step.index)
                step("tail", leader=leader.broker_id, offsets=detail["tail"])
                time.sleep(fault.duration)
                clients = cluster.from_clients(leader)
                cluster.cut(clients)
                cut += clients
                detail["overtaken"] = _overtaken(cluster, leader, partition)
                step("overtaken" if detail["overtaken"] else "not-overtaken", leader=leader.broker_id)
            finally:
                cluster.uncut(cut)
        else:
            detail["lost_bytes"] = _take_down(cluster, [leader], how == "power-loss", step)
            time.sleep(fault.duration)
            cluster.bring_up(leader)
        return detail
    finally:
        cluster.uncut(lag)


def _write_tail(leader: Broker, partition: int, index: int, topic: str = QUEUE_TOPIC) -> list[int]:
    """TAIL_RECORDS records that only the isolated leader takes (acks=1, from the harness straight to it,
    never retried elsewhere), at the offsets returned (none when it refused them). The workload's own
    unreplicated appends are not enough for a divergent tail: its idempotent producers send the same
    batches again to the next leader, which may then hold the very same records at those offsets, so a
    follower that never truncates to the leader's epoch end (the no-truncate mutant) looked like one
    that does. Nothing acknowledged with acks=all is among them: the checker never hears of them."""
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{leader.front.port}", "acks": 1,
                         "enable.idempotence": False, "retries": 0, "message.timeout.ms": 5000,
                         "socket.timeout.ms": 5000, "log_level": 3})
    offsets: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            offsets.append(msg.offset())

    for i in range(TAIL_RECORDS):
        producer.produce(topic, f"tail-{index}-{i}".encode(), partition=partition, on_delivery=delivered)
    producer.flush(10)
    return sorted(offsets)


def _overtaken(cluster: ChaosCluster, leader: Broker, partition: int, topic: str = QUEUE_TOPIC) -> bool:
    """Hold an isolated leader's cut (up to OVERTAKE_WAIT_S) until another broker leads its partition and
    has written past the isolated leader's log end. What the isolated leader appended and could not
    replicate is then a divergent tail that it must truncate when it follows again: healed sooner, it
    fetched from past the new leader's end and was cut back to it, which hides a follower that never
    truncates to the leader's epoch end (the no-truncate mutant). The clients are cut from the isolated
    leader by then: it still answers their metadata as the leader (it hears from no controller), so
    they would keep writing to it and the new leader would take nothing."""
    sessions: list[KazooClient] = []  # made in the wait: ZooKeeper may be down for now (a zk-restart overlaps)

    def ahead() -> bool:
        if not sessions:
            sessions.append(cluster.zk_client())
        data, _ = sessions[0].get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        new = json.loads(data)["leader"]
        if new in (-1, leader.broker_id):
            return False
        name = f"{topic}-{partition}"
        return log_end(cluster.by_id(new).data_dir / "logs" / name) > log_end(leader.data_dir / "logs" / name)

    try:
        return _wait(ahead, OVERTAKE_WAIT_S)
    finally:
        for zk in sessions:
            zk.stop()
            zk.close()


def _take_down(cluster: ChaosCluster, victims: list[Broker], power_loss: bool, step: _Steps) -> dict[str, Any]:
    """Kill the victims, or power them off when that cannot lose acknowledged records by design (cluster.py's
    power_loss_risk: Kafka would lose them too); bytes cut per broker and partition."""
    risk = cluster.power_loss_risk(victims) if power_loss else None
    if risk is not None:
        step("killed, not powered off", brokers=[v.broker_id for v in victims], risk=risk)
    lost = {v.name: cluster.take_down(v, power_loss=power_loss and risk is None) for v in victims}
    return {name: cut for name, cut in lost.items() if cut}


def _power_loss_two(cluster: ChaosCluster, hold: float, step: _Steps) -> dict[str, Any]:
    """Two brokers lose power together: a pair whose loss leaves every partition an ISR member that holds its
    records (power_loss_risk); without such a pair, two brokers are only killed."""
    pairs = [[b for b in cluster.brokers if b is not survivor] for survivor in cluster.brokers]
    safe = [pair for pair in pairs if cluster.power_loss_risk(pair) is None]
    victims = (safe or pairs)[0]
    step("power-loss", brokers=[v.broker_id for v in victims])
    lost = _take_down(cluster, victims, bool(safe), step)
    time.sleep(hold)
    for victim in victims:
        cluster.bring_up(victim)
    return {"lost_bytes": lost}


def _controller_bounce(cluster: ChaosCluster, fault: Fault, controller: Broker, step: _Steps) -> dict[str, Any]:
    """Chaos seed 6, made to happen: the controller (leading a partition) loses power; the dead session's
    registration and /controller are replaced by a /controller of the harness's session naming it still (as
    the dead session's did until it expired), the broker restarts and registers again, and only then is that
    /controller deleted: the next controller's failover finds the broker live, registered after the partition
    states were written, and named their leader."""
    zk = cluster.zk_client()
    try:
        partitions = cluster.admin().list_topics(QUEUE_TOPIC, timeout=5).topics[QUEUE_TOPIC].partitions
        led = [p for p in range(len(partitions)) if partition_state(cluster, p)[0] == controller.broker_id]
        step("power-loss", broker=controller.broker_id, leads=led)
        lost = _take_down(cluster, [controller], True, step)
        registration = f"/brokers/ids/{controller.broker_id}"
        try:
            data, _ = zk.get("/controller")
            if json.loads(data)["brokerid"] != controller.broker_id:
                raise NoNodeError("/controller names another broker now")
            transaction = zk.transaction()
            transaction.delete(registration)
            transaction.delete("/controller")
            transaction.create("/controller", data, ephemeral=True)
            held = all(r is True or isinstance(r, str) for r in transaction.commit())
        except NoNodeError:
            held = False
        cluster.bring_up(controller)
        again = _wait(lambda: zk.exists(registration) is not None, REGISTER_WAIT_S)
        if held:
            zk.delete("/controller")
        step("controller-deleted" if held and again else "race-not-made", registered_again=again)
        time.sleep(fault.duration)
        return {"lost_bytes": lost, "leads": led}
    finally:
        zk.stop()
        zk.close()


def _lose_isr(cluster: ChaosCluster, leader: Broker, duration: float, history: History) -> dict[str, Any]:
    # The leader shrinks the ISR through the controller (AlterPartition), so the paused follower must not
    # be the controller: a paused controller leaves the ISR as it is, and nothing acked can be lost.
    controller = cluster.admin().list_topics(timeout=5).controller_id
    followers = sorted((b for b in cluster.brokers if b is not leader), key=lambda b: b.broker_id == controller)
    follower, other = followers[:2]
    cluster.pause(follower)
    # Out of the ISR (still in ZooKeeper), then records that only the two left acknowledged: waited for, not
    # slept for (a loaded machine shrank the ISR just before the power loss, and nothing was lost).
    out = _wait(lambda: follower.broker_id not in partition_state(cluster, 0)[2], LAG_TIMEOUT_S)
    log = other.data_dir / "logs" / f"{QUEUE_TOPIC}-0"
    shrunk_at = log_end(log)
    grew = _wait(lambda: log_end(log) >= shrunk_at + ACKED_AFTER_SHRINK, LAG_TIMEOUT_S)
    history.add("fault-step", step="power-loss", brokers=[leader.broker_id, other.broker_id], out_of_isr=out,
                acknowledged_since=grew)
    lost = {f"b{b.broker_id}": cluster.power_loss(b) for b in (leader, other)}
    cluster.resume(follower)
    time.sleep(duration)
    cluster.restart(leader)
    cluster.restart(other)
    return {"lost_bytes": lost, "stale_follower": follower.broker_id}


def _share_stall_then_kill(cluster: ChaosCluster, hold: float, rng: random.Random, step: _Steps,
                           history: History) -> dict[str, Any]:
    """A share-partition's state writes held back, then its leader killed with them unwritten: the leader's
    connections to the share coordinator of one share-partition (the leader of the ``__share_group_state``
    partition that stores it) freeze for the fault's duration while the members go on releasing and accepting
    its records and locks run out, so every write of its new states stays pending; then the leader is killed
    and the frozen writes are dropped with its connections. A leader that hands a released record out again
    before its new count is written (the released-before-written mutant) leaves the next leader an older
    count: the record comes back with its count gone down. The share-partition is one the members were handed
    records of (they take a few seconds to join, longer on a loaded machine: waited for up to SHARE_AIM_WAIT_S)
    and whose leader is not its coordinator (that one writes in-process); when every read one's leader is its
    coordinator, one's leadership is moved first (share_aim.py). When none can be aimed at, the fault is
    skipped, loudly: a `fault-skipped` event that the round's report counts (run.py), so that a round that
    did not exercise it is not read as clean. The duration should pass share.coordinator.write.timeout.ms
    (5 s): the members' acknowledgements wait that long for the frozen writes, and only then do they poll what
    the leader handed out meanwhile."""
    chosen, why = _share_aim(cluster, rng, history)
    if chosen is not None and chosen.moved_from is not None:
        unmoved = _share_move(cluster, chosen, history, step)
        if unmoved is not None:
            chosen, why = None, unmoved
    if chosen is None:
        history.add("fault-skipped", id=step.index, kind="share-stall-then-kill", reason=why)
        return {"stalled": None, "skipped": why}  # nothing to hold: ends now (its look may have taken 30 s)
    partition, leader, coordinator = chosen.partition, chosen.leader, chosen.coordinator
    stall = cluster.into(cluster.by_id(coordinator), cluster.by_id(leader))
    cluster.cut(stall)
    try:
        step("stalled", partition=partition, leader=leader, coordinator=coordinator)
        time.sleep(hold)
        lost = _take_down(cluster, [cluster.by_id(leader)], False, step)
    finally:
        cluster.uncut(stall)
    time.sleep(SHARE_LEADER_DOWN_S)
    cluster.bring_up(cluster.by_id(leader))
    return {"stalled": partition, "leader": leader, "coordinator": coordinator, "lost_bytes": lost,
            "moved_from": chosen.moved_from}


def _share_aim(cluster: ChaosCluster, rng: random.Random, history: History) -> tuple[share_aim.Aim | None, str]:
    """share_aim.aim, asked again until it finds a share-partition (up to SHARE_AIM_WAIT_S); else why not."""
    found: list[share_aim.Aim | None] = [None]
    why = ["not looked yet"]
    hurry_at = time.monotonic() + SHARE_MOVE_AFTER_S

    def aimed() -> bool:
        read = {e["partition"] for e in history.snapshot() if e["type"] == "share-deliver"}
        live = {b.broker_id for b in cluster.brokers if b.alive and not b.paused}
        try:
            views = share_aim.share_views(cluster.bootstrap) if read else []
            found[0] = share_aim.aim(views, read, live, rng, hurry=time.monotonic() >= hurry_at)
            why[0] = share_aim.unaimed(views, read, live)
        except Exception as exc:  # noqa: BLE001 - a cluster in flux; asked again
            why[0] = f"no answer: {type(exc).__name__}: {exc}"
            return False
        return found[0] is not None
    _wait(aimed, SHARE_AIM_WAIT_S)
    return found[0], why[0]


def _share_move(cluster: ChaosCluster, chosen: share_aim.Aim, history: History, step: _Steps) -> str | None:
    """Move the chosen share-partition's leadership to `chosen.leader`; why not, when it did not move. Then wait (up
    to SHARE_READ_WAIT_S each) for the new leader to read the share-partition's state from its coordinator (its
    log says so) and for the members to be handed records after that: stalled sooner, the new leader's read of
    its state is what freezes, it serves nothing in the stall, and the fault tests nothing (seed 11 once stalled
    1.1 s into the move and caught nothing)."""
    partition, leader = chosen.partition, chosen.leader
    log = cluster.by_id(leader).data_dir / "broker.log"
    mark = log.stat().st_size
    step("moving", partition=partition, leader=chosen.moved_from, to=leader, coordinator=chosen.coordinator)
    try:
        unmoved = share_aim.move_leader(cluster.bootstrap, partition, leader)
    except Exception as exc:  # noqa: BLE001 - no cluster to ask
        unmoved = f"{type(exc).__name__}: {exc}"
    if unmoved is not None:
        return f"p{partition}'s leadership not moved to {leader}: {unmoved}"
    if not _wait(lambda: share_aim.state_read_since(log, mark, partition), SHARE_READ_WAIT_S):
        step("state-not-read-by-new-leader", partition=partition, leader=leader)
    served_at = history.now()
    if not _wait(lambda: _read_since(history, partition, served_at), SHARE_READ_WAIT_S):
        step("not-read-since-moved", partition=partition, leader=leader)
    return None


def _read_since(history: History, partition: int, since: float) -> bool:
    return any(e["type"] == "share-deliver" and e["partition"] == partition and e["t"] > since
               for e in history.snapshot())
