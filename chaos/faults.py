"""Seeded fault schedules: which faults, aimed at whom, when and for how long (nemesis.py applies them).

Three generators:
  sequential   one fault at a time, each healed before a quiet gap and the next (the first harness's
               schedules: `make test`'s smoke seeds name these);
  overlapping  faults that start while others still hold, aimed at any partition's leader or preferred
               replica, the controller or a random broker, with the composite faults below among them;
  aimed        only the composite faults (`--kinds` picks some), one after another.

Composite faults (one thread each, steps recorded as `fault-step`):
  lag-then-kill, lag-then-power-loss, lag-then-isolate
               the first replica of a partition's assignment other than its leader is cut off from the
               leader until it leaves the ISR, then the leader is killed, powered off, or cut from the
               brokers and ZooKeeper (taking a few acks=1 records from the harness that no other replica
               can hold, then cut from the clients too until another broker leads and has written past
               it): a controller electing a live replica outside the ISR loses data, a follower that
               keeps the isolated leader's unreplicated tail diverges;
  failover-mid a partition's leader is killed, and halfway through the controller too;
  net-and-zk   one broker cut from another while a third (or the same) is cut from ZooKeeper;
  power-loss-two
               two brokers lose power together, leaving every partition an in-sync copy;
  controller-bounce
               chaos seed 6: the controller, leading a partition, loses power and registers again before
               the next controller is elected (the dead session's registration and /controller are
               deleted around its restart, so the race it lost "now and then" is lost every time);
  clients-cut  every client connection to a broker frozen (brokers and ZooKeeper still reach it);
  share-stall-then-kill
               share rounds only (`--share`): a share-partition leader's writes to its share coordinator
               frozen for 8-12 s while the members release, accept and time out its records and poll again
               (their acknowledgements wait 5 s for the writes), then the leader killed
               with them unwritten (a released record handed out before its new count is written comes
               back with the count gone down: the released-before-written mutant). The share-partition is
               one the members read, led apart from its coordinator; when every read one is led by its
               coordinator, one's leadership is moved off it first (share_aim.py); when none can be aimed at
               the fault is skipped and the round's outcome says so (run.py).

Targets named by role are resolved when the fault starts, so the history records which broker it hit.
A power loss that could take every in-sync copy of an acknowledged write loses it in Kafka too (neither
fsyncs before acknowledging): power losses never overlap in a schedule, and when one starts the nemesis
checks the partition states in ZooKeeper and only kills its victims if powering them off could
(cluster.py's power_loss_risk; recorded as a `fault-step`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from chaos.cluster import REPLICA_LAG_MS, SESSION_TIMEOUT_MS

# kind -> (targets to choose from, shortest and longest duration in seconds): the sequential schedules'
# kinds, in the order their seeds were drawn with (changing it changes every existing seed's schedule).
KINDS: dict[str, tuple[tuple[str, ...], float, float]] = {
    "kill": (("random", "leader", "controller"), 1.0, 4.0),
    "kill-two": (("random",), 1.0, 3.0),
    "power-loss": (("random", "leader"), 1.0, 3.0),
    # shorter than replica.lag.time.max.ms; between it and the session timeout; longer than both
    "pause-short": (("random", "leader", "controller"), 0.3, 0.8 * min(REPLICA_LAG_MS, SESSION_TIMEOUT_MS) / 1000),
    "pause-lag": (("random", "leader"), 1.2 * REPLICA_LAG_MS / 1000, 0.8 * SESSION_TIMEOUT_MS / 1000),
    "pause-long": (("random", "leader", "controller"), 1.5 * SESSION_TIMEOUT_MS / 1000,
                   2.0 * SESSION_TIMEOUT_MS / 1000),
    "zk-restart": (("zookeeper",), 1.0, 5.0),
    "isolate": (("random", "leader", "controller"), 2.0, 8.0),  # from the other brokers (not from clients/ZK)
    "zk-cut": (("random", "leader", "controller"), 2.0, 8.0),  # a broker from ZooKeeper
}

AIMED = ("random", "leader", "preferred", "controller")
# What a lag-then-* fault's wait for its follower to leave the ISR takes, as the schedules count it (the
# wait itself may take up to nemesis.LAG_TIMEOUT_S on a loaded machine; the seeds' schedules stay as drawn).
LAG_WAIT_S = 3.0 * REPLICA_LAG_MS / 1000


@dataclass(frozen=True)
class Spec:
    targets: tuple[str, ...]
    shortest: float
    longest: float
    extra: float = 0.0  # seconds a composite fault takes besides its duration (waiting for a lag)
    power_loss: bool = False  # never overlaps another power loss
    exclusive: bool = False  # overlaps nothing


SPECS: dict[str, Spec] = {
    "kill": Spec(AIMED, 1.0, 4.0),
    "kill-two": Spec(("random", "leader"), 1.0, 3.0),
    "power-loss": Spec(AIMED, 1.0, 3.0, power_loss=True),
    "pause-short": Spec(AIMED, *KINDS["pause-short"][1:]),
    "pause-lag": Spec(AIMED, *KINDS["pause-lag"][1:]),
    "pause-long": Spec(AIMED, *KINDS["pause-long"][1:]),
    "zk-restart": Spec(("zookeeper",), 1.0, 5.0),
    "isolate": Spec(AIMED, 2.0, 8.0),
    "zk-cut": Spec(AIMED, 2.0, 8.0),
    "clients-cut": Spec(AIMED, 2.0, 6.0),
    "net-and-zk": Spec(AIMED, 2.0, 6.0),
    "failover-mid": Spec(("leader", "preferred"), 2.0, 6.0),
    "lag-then-kill": Spec(("leader",), 1.0, 4.0, extra=LAG_WAIT_S),
    "lag-then-power-loss": Spec(("leader",), 1.0, 3.0, extra=LAG_WAIT_S, power_loss=True),
    "lag-then-isolate": Spec(("leader",), 1.5 * SESSION_TIMEOUT_MS / 1000, 2.0 * SESSION_TIMEOUT_MS / 1000,
                             extra=LAG_WAIT_S),
    "power-loss-two": Spec(("random",), 1.0, 3.0, power_loss=True, exclusive=True),
    "controller-bounce": Spec(("controller",), 1.0, 3.0, extra=SESSION_TIMEOUT_MS / 1000, power_loss=True,
                              exclusive=True),
}
SHARE_LEADER_DOWN_S = 2.0  # share-stall-then-kill: how long the killed share-partition leader stays down
# Share rounds only (they need the share workload's topic and group): drawn only when the round has it, after
# the others, so that the other rounds' schedules stay as their seeds drew them.
SHARE_KINDS = ("share-stall-then-kill",)
# Longer than share.coordinator.write.timeout.ms (5 s), which the members' acknowledgements wait for the frozen
# writes: they poll again inside the stall.
SPECS["share-stall-then-kill"] = Spec(("share",), 8.0, 12.0, extra=SHARE_LEADER_DOWN_S + 2.0)
COMPOSITE = ("lag-then-kill", "lag-then-power-loss", "lag-then-isolate", "failover-mid", "net-and-zk",
             "power-loss-two", "controller-bounce", "clients-cut")
GENERATORS = ("sequential", "overlapping", "aimed")


@dataclass
class Fault:
    at: float
    kind: str
    target: str
    duration: float
    partition: int | None = None  # whose leader, preferred replica or follower the fault aims at

    @property
    def aim(self) -> str:
        return self.target if self.partition is None else f"{self.target} of p{self.partition}"

    def describe(self) -> str:
        return f"{self.at:5.1f}s {self.kind}({self.aim}) {self.duration:.1f}s"

    def end(self) -> float:
        """When it has surely been given back (composite faults' extra steps included)."""
        return self.at + self.duration + SPECS[self.kind].extra if self.kind in SPECS else self.at + self.duration


def schedule(seed: int, duration: float, kinds: list[str] | None = None, *, generator: str = "sequential",
             partitions: int = 3, share: bool = False) -> list[Fault]:
    """The seed's faults; the share-only kinds among the defaults of a round with the share workload (`share`),
    and never drawn without it."""
    if not share and set(kinds or ()) & set(SHARE_KINDS):
        raise ValueError(f"{', '.join(SHARE_KINDS)} need the share workload (--share)")
    extra = list(SHARE_KINDS) if share else []
    if generator == "sequential":
        return sequential(seed, duration, kinds)
    if generator == "overlapping":
        return overlapping(seed, duration, partitions, kinds or [k for k in SPECS if k not in SHARE_KINDS] + extra)
    if generator == "aimed":
        return overlapping(seed, duration, partitions, kinds or [*COMPOSITE, *extra], overlap=False)
    raise ValueError(f"unknown schedule generator {generator}")


def sequential(seed: int, duration: float, kinds: list[str] | None = None) -> list[Fault]:
    rng = random.Random(seed)
    names = kinds or list(KINDS)
    faults: list[Fault] = []
    at = rng.uniform(2.0, 4.0)
    while True:
        kind = rng.choice(names)
        targets, shortest, longest = KINDS[kind]
        length = round(rng.uniform(shortest, longest), 1)
        if at + length > duration - 3.0:
            return faults
        faults.append(Fault(round(at, 1), kind, rng.choice(targets), length))
        at += length + rng.uniform(3.0, 6.0)


def overlapping(seed: int, duration: float, partitions: int, kinds: list[str] | None = None, *,
                overlap: bool = True) -> list[Fault]:
    """Faults every 1-5 s whatever still holds (`overlap`; else each after the previous ended), each
    aimed at a random partition; a power loss waits for the previous one to end, an exclusive fault for
    every fault. Stops at the first fault that would not end 3 s before `duration`."""
    rng = random.Random(seed)
    names = kinds or [k for k in SPECS if k not in SHARE_KINDS]
    faults: list[Fault] = []
    at = rng.uniform(2.0, 4.0)
    while True:
        kind = rng.choice(names)
        spec = SPECS[kind]
        length = round(rng.uniform(spec.shortest, spec.longest), 1)
        busy = [f.end() for f in faults if not overlap or spec.exclusive or SPECS[f.kind].exclusive
                or (spec.power_loss and SPECS[f.kind].power_loss)]
        at = max([at, *(end + 1.0 for end in busy)])
        if at + length + spec.extra > duration - 3.0:
            return faults
        target = rng.choice(spec.targets)
        partition = rng.randrange(partitions) if target in ("leader", "preferred") else None
        faults.append(Fault(round(at, 1), kind, target, length, partition))
        at += rng.uniform(1.0, 5.0) if overlap else length + spec.extra + rng.uniform(2.0, 4.0)


def expected_loss_schedule() -> list[Fault]:
    """Partition 0's follower drops out of the ISR (paused past replica.lag.time.max.ms), then the
    leader and the other follower lose power together: only unsynced data held the acked tail."""
    return [Fault(4.0, "lose-isr", "leader", 6.0, 0)]
