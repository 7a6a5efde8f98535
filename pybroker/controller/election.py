"""Pure decisions of the controller: who leads (Kafka's Election.scala and `PartitionLeaderElectionAlgorithms`).

Every election takes a partition's stored state and returns the state to write next (None: no
change), always at a new leader epoch so every replica learns of it; the controller writes it.
Where replicas go is ``pybroker.common.placement``'s, which the command-line tools share.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import AbstractSet, Mapping, Sequence

from pybroker.common.election_type import ElectionType
from pybroker.common.ids import LeaderEpoch, next_epoch
from pybroker.common.placement import assign_replicas, check_assignment, check_replicas, plan_added_partitions
from pybroker.zk.paths import NO_LEADER, LeaderAndIsr

__all__ = ["ElectionOutcome", "ElectionType", "LogEnd", "Reassignment", "assign_replicas", "check_assignment",
           "check_replicas", "controlled_shutdown_election", "elect_leader", "elect_on_request", "initial_state",
           "longest_log_election", "needs_unclean_election", "new_leader_epoch", "offline_election",
           "plan_added_partitions", "preferred_election", "reassignment_election", "request_election"]


def elect_leader(replicas: Sequence[int], isr: Sequence[int], live: set[int], *,
                 unclean: bool = False) -> int | None:
    """The first replica in assignment order that is live and in sync (so the preferred replica
    wins whenever it can); with `unclean`, any live replica when the ISR has none left."""
    for replica in replicas:
        if replica in live and replica in isr:
            return replica
    if unclean:
        for replica in replicas:
            if replica in live:
                return replica
    return None


def needs_unclean_election(state: LeaderAndIsr, replicas: Sequence[int], live: set[int]) -> bool:
    """The leader is gone and no live replica is in sync, or the partition waits for every ISR member
    to compare logs and some are away: only an unclean election can give a leader now."""
    if state.elect_longest_log:
        return not set(state.isr) <= live
    isr = tuple(b for b in state.isr if b in live) or state.isr
    return state.leader not in live and elect_leader(replicas, isr, live) is None


def offline_election(state: LeaderAndIsr, replicas: Sequence[int], live: set[int], controller_epoch: int, *,
                     unclean: bool = False, restarted: AbstractSet[int] = frozenset()) -> LeaderAndIsr | None:
    """Brokers died (Kafka's offlinePartitionLeaderElection): dead brokers leave the ISR and a partition
    whose leader died gets a new one from the live ISR members; an unclean leader becomes the only ISR
    member. ``restarted`` brokers (bounced, KIP-380) are not in ``live``: they may have lost an
    unflushed tail.

    When no ISR member that surely kept its log is live, the partition gets no leader and keeps its
    whole ISR, with ``elect_longest_log`` when it has several members (a sole member leads when it is
    back, having all there is): a member that comes back may have lost power and its tail,
    or may hold everything acknowledged, and only its log can tell. The members are compared once they
    are all back (`longest_log_election`). Electing the first one back lost acknowledged writes in
    both directions: chaos round 2003 elected a restarted member with an empty log over one that was
    down, and round 7001 kept waiting for the member that was down (it had lost power) over a member
    that had restarted intact."""
    if state.elect_longest_log:
        if not unclean:
            return None
        chosen = elect_leader(replicas, (), live, unclean=True)  # the members' logs may differ: it alone is in sync
        return None if chosen is None else LeaderAndIsr(chosen, next_epoch(state.leader_epoch), (chosen,),
                                                        controller_epoch, state.zk_version)
    intact = tuple(b for b in state.isr if b in live)
    if state.leader not in live and not intact and not unclean and len(state.isr) > 1:
        return LeaderAndIsr(NO_LEADER, next_epoch(state.leader_epoch), state.isr, controller_epoch, state.zk_version,
                            elect_longest_log=True)
    leader: int | None = state.leader
    isr = intact or state.isr  # when none lives, the last members stay
    if leader not in live:
        leader = elect_leader(replicas, isr, live, unclean=unclean)
    if leader is not None and leader not in isr:
        isr = (leader,)
    leader = NO_LEADER if leader is None else leader
    if leader == state.leader and isr == state.isr:
        return None
    return LeaderAndIsr(leader, next_epoch(state.leader_epoch), isr, controller_epoch, state.zk_version)


LogEnd = tuple[int, int]
"""A replica's (latest leader epoch, log end offset): the later epoch, then the longer log, is ahead."""


def longest_log_election(state: LeaderAndIsr, replicas: Sequence[int], ends: Mapping[int, LogEnd],
                         controller_epoch: int) -> LeaderAndIsr:
    """Every ISR member of a partition that waits with ``elect_longest_log`` answered: the one furthest
    ahead leads (KIP-966's unclean recovery compares logs the same way), and the members level with it,
    whose logs are the same, stay in sync; the others rejoin once they have caught up."""
    best = max(ends.values())
    level = tuple(b for b in replicas if ends.get(b) == best) or \
        tuple(b for b in state.isr if ends.get(b) == best)
    return LeaderAndIsr(level[0], next_epoch(state.leader_epoch), level, controller_epoch, state.zk_version)


def controlled_shutdown_election(state: LeaderAndIsr, replicas: Sequence[int], broker_id: int, live: set[int],
                                 controller_epoch: int) -> LeaderAndIsr | None:
    """`broker_id` is shutting down (Kafka's controlledShutdownPartitionLeaderElection): it leaves the ISR
    and, when it leads, another live ISR member takes over. None when it is not in the ISR, is its last
    member, or leads with no one to take over (the broker retries later)."""
    isr = tuple(b for b in state.isr if b != broker_id)
    if broker_id not in state.isr or not isr or state.elect_longest_log:
        return None
    leader = state.leader
    if leader == broker_id:
        successor = elect_leader(replicas, isr, live)
        if successor is None:
            return None
        leader = successor
    return LeaderAndIsr(leader, next_epoch(state.leader_epoch), isr, controller_epoch, state.zk_version)


def preferred_election(state: LeaderAndIsr, preferred: int, controller_epoch: int) -> LeaderAndIsr | None:
    """Leadership back to the preferred replica (auto.leader.rebalance), only when it is in sync."""
    if state.leader == preferred or preferred not in state.isr or state.elect_longest_log:
        return None
    return LeaderAndIsr(preferred, next_epoch(state.leader_epoch), state.isr, controller_epoch, state.zk_version)


def reassignment_election(state: LeaderAndIsr, replicas: Sequence[int], live: set[int],
                          controller_epoch: int) -> LeaderAndIsr:
    """A move settles on `replicas` (Kafka's reassignPartitionLeaderElection): the ISR keeps only them
    (all of them when none is in sync yet), the leader stays if it is one of them and live."""
    isr = tuple(b for b in state.isr if b in replicas) or tuple(replicas)
    if state.elect_longest_log:  # still no leader until the remaining members' logs are compared
        return LeaderAndIsr(NO_LEADER, next_epoch(state.leader_epoch), isr, controller_epoch, state.zk_version,
                            elect_longest_log=True)
    leader = state.leader if state.leader in replicas and state.leader in live else \
        elect_leader(replicas, isr, live)
    return LeaderAndIsr(NO_LEADER if leader is None else leader, next_epoch(state.leader_epoch), isr, controller_epoch,
                        state.zk_version)


def new_leader_epoch(state: LeaderAndIsr, controller_epoch: int) -> LeaderAndIsr:
    """The same leader and ISR at a new leader epoch, so replicas apply a changed replica set."""
    return LeaderAndIsr(state.leader, next_epoch(state.leader_epoch), state.isr, controller_epoch, state.zk_version)


def initial_state(replicas: Sequence[int], live: set[int], controller_epoch: int) -> LeaderAndIsr:
    """A new partition (NewPartition -> OnlinePartition): its live replicas in sync, the first leads."""
    isr = tuple(b for b in replicas if b in live)
    return LeaderAndIsr(isr[0] if isr else NO_LEADER, LeaderEpoch(0), isr or tuple(replicas), controller_epoch)


class ElectionOutcome(Enum):
    ELECTED = "elected"
    NOT_NEEDED = "not needed"
    PREFERRED_NOT_AVAILABLE = "preferred leader not available"
    NO_ELIGIBLE_LEADER = "no eligible leader"
    UNKNOWN_PARTITION = "unknown partition"
    TOPIC_BEING_DELETED = "topic being deleted"  # queued for deletion: no election (Kafka's controller skips it)


def elect_on_request(election_type: ElectionType, replicas: Sequence[int], leader: int, isr: Sequence[int],
                     live: set[int]) -> tuple[ElectionOutcome, int | None]:
    """An administrator's election (Kafka's controller on ElectLeaders): PREFERRED moves leadership to
    the first replica if it is live and in sync; UNCLEAN elects only where no live leader exists,
    from the ISR first, else from any live replica. Returns the outcome and the new leader."""
    if election_type == ElectionType.PREFERRED:
        preferred = replicas[0]
        if leader == preferred:
            return ElectionOutcome.NOT_NEEDED, None
        if preferred in live and preferred in isr:
            return ElectionOutcome.ELECTED, preferred
        return ElectionOutcome.PREFERRED_NOT_AVAILABLE, None
    if leader in live:
        return ElectionOutcome.NOT_NEEDED, None
    chosen = elect_leader(replicas, isr, live, unclean=True)
    return (ElectionOutcome.NO_ELIGIBLE_LEADER, None) if chosen is None else (ElectionOutcome.ELECTED, chosen)


def request_election(election_type: ElectionType, state: LeaderAndIsr, replicas: Sequence[int], live: set[int],
                     controller_epoch: int) -> tuple[ElectionOutcome, LeaderAndIsr | None]:
    """ElectLeaders on one partition: the outcome and the state to write (None: nothing to write); an
    unclean leader becomes the only ISR member."""
    if state.elect_longest_log and election_type == ElectionType.PREFERRED:
        return ElectionOutcome.PREFERRED_NOT_AVAILABLE, None  # no one leads until the logs are compared
    outcome, leader = elect_on_request(election_type, replicas, state.leader, state.isr, live)
    if leader is None:
        return outcome, None
    isr = state.isr if leader in state.isr and not state.elect_longest_log else (leader,)
    return outcome, LeaderAndIsr(leader, next_epoch(state.leader_epoch), isr, controller_epoch, state.zk_version)


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition moving from `original` to `target` replicas; while it runs the partition's replica set
    is the target followed by the original replicas being removed (Kafka's ReplicaAssignment)."""

    target: tuple[int, ...]
    original: tuple[int, ...]

    @property
    def replicas(self) -> tuple[int, ...]:
        return self.target + tuple(r for r in self.original if r not in self.target)

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(r for r in self.target if r not in self.original)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(r for r in self.original if r not in self.target)

    def caught_up(self, isr: Sequence[int]) -> bool:
        """Every target replica is in sync: the old replicas can go."""
        return all(r in isr for r in self.target)
