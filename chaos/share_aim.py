"""What share-stall-then-kill (nemesis.py) aims at: a share-partition the members read whose leader is not its share
coordinator (the leader of the ``__share_group_state`` partition that stores its state), so that the leader's
writes of its states cross a link the fault can freeze. A leader that is its own coordinator writes in-process.

With three brokers and two share-partitions, each share-partition's leader is its coordinator one time in three
(the two placements are random and independent), so both are one round in nine: the fault then moves one read
share-partition's leadership to an in-sync replica other than its coordinator (its assignment reordered with
that replica first, then a preferred-leader election, as ``kafka-reassign-partitions`` and
``kafka-leader-election`` would) instead of finding nothing to aim at. `aim` is the choice, pure; the rest asks
the cluster through the repository's own admin client (it names topic ids and speaks AlterPartitionReassignments,
which confluent-kafka's does not).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from pathlib import Path

from chaos.share_state_log import STATE_TOPIC
from chaos.share_workload import SHARE_GROUP, SHARE_TOPIC, STATE_READ
from pybroker.client import KafkaClient
from pybroker.client.admin import AdminClient, TopicDescription
from pybroker.client.errors import KafkaClientError
from pybroker.common.topic import TopicPartition
from pybroker.coordinator.share_state.records import ShareKey, partition_of

PREFERRED = 0  # ElectLeaders' election type
MOVE_TIMEOUT_S = 15.0  # for a moved share-partition's new leader to lead (the controller may be busy, loaded)


@dataclass(frozen=True)
class ShareView:
    """One share-partition as the metadata shows it now; -1 where there is no leader (or no state topic yet)."""
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    coordinator: int


@dataclass(frozen=True)
class Aim:
    """The share-partition to stall and the leader to kill; `moved_from` is its leader now when the fault must first
    move its leadership to `leader` (every read share-partition's leader was its coordinator)."""
    partition: int
    leader: int
    coordinator: int
    moved_from: int | None = None


def aim(views: list[ShareView], read: set[int], live: set[int], rng: random.Random, *,
        hurry: bool = False) -> Aim | None:
    """A read share-partition led apart from its coordinator; else one whose leadership can move to a live in-sync
    replica apart from it, once every share-partition was read (one not read yet may be led apart: a move is a
    leader change the fault need not add) or when `hurry`; else None (`unaimed` says why)."""
    usable = [v for v in views if v.partition in read and v.leader >= 0 and v.coordinator >= 0]
    apart = [v for v in usable if v.leader != v.coordinator]
    if apart:
        chosen = rng.choice(apart)
        return Aim(chosen.partition, chosen.leader, chosen.coordinator)
    if not hurry and not {v.partition for v in views} <= read:
        return None
    movable = [(v, to) for v in usable for to in v.isr if to != v.coordinator and to in live]
    if movable:
        chosen, to = rng.choice(movable)
        return Aim(chosen.partition, to, chosen.coordinator, moved_from=chosen.leader)
    return None


def unaimed(views: list[ShareView], read: set[int], live: set[int]) -> str:
    """Why `aim` found nothing, for the round's report."""
    if not read:
        return "no share-partition read yet (the members have not joined or been handed records)"
    if not views or all(v.coordinator < 0 for v in views):
        return "no share coordinator yet (__share_group_state not created or without leaders)"
    usable = [v for v in views if v.partition in read and v.leader >= 0 and v.coordinator >= 0]
    if not usable:
        return f"share-partitions {sorted(read)} read but without a leader or coordinator now: {views}"
    if not {v.partition for v in views} <= read:
        return f"share-partitions {sorted(read)} read, each led by its coordinator, the others not read yet: {usable}"
    return f"every read share-partition led by its coordinator, with no live in-sync replica apart from it: {usable}"


def moved_replicas(replicas: tuple[int, ...], to: int) -> list[int]:
    """The assignment reordered so that `to` is its preferred replica (the replica set unchanged)."""
    return [to, *(r for r in replicas if r != to)]


def state_read_since(log: Path, mark: int, partition: int) -> bool:
    """Whether the broker whose log this is read the share-partition's state (it does as its leader, before it serves
    it) in what it logged past byte `mark`."""
    with open(log, "rb") as f:
        f.seek(mark)
        lines = f.read().decode(errors="replace").splitlines()
    return any(found is not None and found["group"] == SHARE_GROUP and found["topic"] == SHARE_TOPIC
               and int(found["partition"]) == partition for found in map(STATE_READ.match, lines))


def share_views(bootstrap: str) -> list[ShareView]:
    """Every share-partition of the share workload with its leader, replicas, ISR and coordinator (Kafka's
    SharePartitionKey ``group:topicId:partition``, as FindCoordinator(SHARE) places it)."""
    return asyncio.run(_views(bootstrap))


def move_leader(bootstrap: str, partition: int, to: int) -> str | None:
    """Make `to` the share-partition's leader: its assignment reordered with `to` first, then a preferred-leader
    election; None once `to` leads, or why it did not within MOVE_TIMEOUT_S."""
    return asyncio.run(_move(bootstrap, partition, to))


async def _views(bootstrap: str) -> list[ShareView]:
    async with KafkaClient(bootstrap, timeout=5.0) as client:
        admin = AdminClient(client)
        share = (await admin.describe_topics([SHARE_TOPIC]))[SHARE_TOPIC]
        state = await _described(admin, STATE_TOPIC)
    leaders = {p.partition: p.leader for p in state.partitions} if state else {}
    views = []
    for p in share.partitions:
        key = ShareKey(SHARE_GROUP, share.topic_id, p.partition)
        coordinator = leaders.get(partition_of(key, len(leaders))) if leaders else None
        views.append(ShareView(p.partition, -1 if p.leader is None else p.leader, p.replicas, p.isr,
                               -1 if coordinator is None else coordinator))
    return views


async def _described(admin: AdminClient, topic: str) -> TopicDescription | None:
    """The topic's description; None while it does not exist (the share coordinator creates its topic on the group's
    first use)."""
    try:
        return (await admin.describe_topics([topic]))[topic]
    except KafkaClientError:
        return None


async def _move(bootstrap: str, partition: int, to: int) -> str | None:
    tp = TopicPartition(SHARE_TOPIC, partition)
    why = f"not leader in {MOVE_TIMEOUT_S:.0f} s"
    async with KafkaClient(bootstrap, timeout=5.0) as client:
        admin = AdminClient(client)
        deadline = time.monotonic() + MOVE_TIMEOUT_S
        while time.monotonic() < deadline:
            try:  # each step again until it shows: a controller moving or loaded answers with errors meanwhile
                described = (await admin.describe_topics([SHARE_TOPIC]))[SHARE_TOPIC]
                now = next(p for p in described.partitions if p.partition == partition)
                if now.leader == to:
                    return None
                if now.replicas[:1] != (to,):
                    error = (await admin.alter_partition_reassignments({tp: moved_replicas(now.replicas, to)})).get(tp)
                    if error is not None:
                        raise error
                elif to in now.isr:  # ELECTION_NOT_NEEDED and the like come back as results, not raised
                    await admin.elect_leaders(PREFERRED, [tp])
            except KafkaClientError as exc:
                why = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.5)
    return why
