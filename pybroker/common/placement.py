"""Where a topic's replicas go (Kafka's ``AdminUtils.assignReplicasToBrokers`` and ``AdminZkClient.addPartitions``):
pure functions that the controller and ``pybroker topics --zookeeper`` / ``reassign-partitions --generate`` share.

Randomness comes in as an argument so tests can pin it.
"""

from __future__ import annotations

import random
from typing import Mapping, Sequence

from pybroker.common.metadata_errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)

__all__ = ["assign_replicas", "check_assignment", "check_replicas", "plan_added_partitions"]


def assign_replicas(brokers: Sequence[tuple[int, str | None]], partitions: int, replication_factor: int, *,
                    first_partition: int = 0, rng: random.Random | None = None) -> dict[int, tuple[int, ...]]:
    """Round-robin assignment with a random start and a shifting follower offset.

    `brokers` are (id, rack). When every broker has a rack, brokers are interleaved rack by rack
    and each follower is the next broker (in that order) on a rack the partition does not use
    yet, until every rack is used, so a partition spans min(replication factor, racks) racks.
    """
    if replication_factor < 1:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Unable to replicate the partition {replication_factor} time(s): The target replication factor of "
            f"{replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered.")
    rng = rng or random.Random()
    rack_aware = all(rack for _, rack in brokers)
    ids = _rack_alternated(brokers) if rack_aware else sorted(b for b, _ in brokers)
    rack_of = dict(brokers)
    racks = len(set(rack_of.values())) if rack_aware else 1
    count = len(ids)
    start = rng.randrange(count)
    shift = rng.randrange(count)
    result: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [ids[first]]
        used_racks = {rack_of[ids[first]]}
        k = 0
        while len(replicas) < replication_factor:
            broker = ids[(first + 1 + (shift * racks + k) % (count - 1)) % count]
            k += 1
            rack_ok = not rack_aware or rack_of[broker] not in used_racks or len(used_racks) == racks
            if rack_ok and broker not in replicas:
                replicas.append(broker)
                used_racks.add(rack_of[broker])
        result[partition] = tuple(replicas)
    return result


def _rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in sorted(brokers):
        by_rack.setdefault(rack or "", []).append(broker_id)
    racks = sorted(by_rack)
    ordered: list[int] = []
    for index in range(max(len(ids) for ids in by_rack.values())):
        ordered.extend(by_rack[rack][index] for rack in racks if index < len(by_rack[rack]))
    return ordered


def check_assignment(plan: Mapping[int, Sequence[int]], registered: set[int], *,
                     first_partition: int = 0) -> tuple[int, int]:
    """Validate an explicit replica assignment (Kafka's messages); (partitions, replication factor)."""
    if sorted(plan) != list(range(first_partition, first_partition + len(plan))):
        raise InvalidReplicaAssignmentError("Partitions should be a consecutive 0-based integer sequence")
    factors = {len(replicas) for replicas in plan.values()}
    if len(factors) != 1:
        raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
    for replicas in plan.values():
        check_replicas(replicas, registered)
    return len(plan), factors.pop()


def check_replicas(replicas: Sequence[int], registered: set[int]) -> None:
    if len(set(replicas)) != len(replicas):
        raise InvalidReplicaAssignmentError(f"Duplicate brokers not allowed in replica assignment: {list(replicas)}")
    unknown = [broker for broker in replicas if broker not in registered]
    if unknown:
        raise InvalidReplicaAssignmentError(f"Unknown broker(s) in replica assignment: {unknown}")


def plan_added_partitions(current: Mapping[int, Sequence[int]], total: int,
                          added_replicas: Sequence[Sequence[int]] | None, brokers: Sequence[tuple[int, str | None]],
                          *, rng: random.Random | None = None) -> dict[int, tuple[int, ...]]:
    """The replicas of the new partitions when a topic with the ``current`` assignment grows to ``total``
    (Kafka's AdminZkClient.addPartitions): ``added_replicas`` checked against the registered ``brokers``
    (id, rack), or a fresh placement with the topic's replication factor."""
    count = len(current)
    if total <= count:
        raise InvalidPartitionsError(
            f"Topic currently has {count} partitions, which is higher than the requested {total}.")
    factor = len(current[0])
    if added_replicas is None:
        return assign_replicas(brokers, total - count, factor, first_partition=count, rng=rng)
    if len(added_replicas) != total - count:
        raise InvalidReplicaAssignmentError(
            f"Increasing the number of partitions by {total - count} but {len(added_replicas)} assignments provided.")
    added = {count + i: tuple(r) for i, r in enumerate(added_replicas)}
    check_assignment(added, {b for b, _ in brokers}, first_partition=count)
    mismatched = {p: len(r) for p, r in added.items() if len(r) != factor}
    if mismatched:
        raise InvalidReplicaAssignmentError(
            f"Inconsistent replication factor between partitions, partition 0 has {factor} while partitions "
            f"[{', '.join(map(str, mismatched))}] have replication factors "
            f"[{', '.join(map(str, mismatched.values()))}], respectively.")
    return added
