"""share-stall-then-kill's view of the cluster (chaos/share_aim.py) against real brokers: the share coordinator it
names for each share-partition is the one FindCoordinator(SHARE) answers, and a share-partition's leadership moves
to the in-sync replica it names (its assignment reordered, then a preferred-leader election): what the fault does
when every read share-partition's leader is its coordinator (one round in nine with two share-partitions on three
brokers; seed 11 found nothing to aim at in CI and said nothing)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from confluent_kafka.admin import NewTopic

from chaos.cluster import ChaosCluster, wait_for
from chaos.share_aim import MOVE_TIMEOUT_S, ShareView, move_leader, share_views
from chaos.share_workload import SHARE_BROKER_CONFIG, SHARE_GROUP, SHARE_PARTITIONS, SHARE_TOPIC
from pybroker.client import KafkaClient
from pybroker.client.admin import AdminClient
from pybroker.common.topic import topic_id_to_string
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse

SHARE_KEY_TYPE = 2


async def _coordinators(bootstrap: str) -> dict[int, int]:
    """FindCoordinator(SHARE) for each share-partition (the first one asked creates ``__share_group_state``);
    partitions it has no answer for yet are left out."""
    async with KafkaClient(bootstrap, timeout=5.0) as client:
        topic_id = (await AdminClient(client).describe_topics([SHARE_TOPIC]))[SHARE_TOPIC].topic_id
        keys = {p: f"{SHARE_GROUP}:{topic_id_to_string(topic_id)}:{p}" for p in range(SHARE_PARTITIONS)}
        response = await (await client.connect()).send(
            FindCoordinatorRequest(key_type=SHARE_KEY_TYPE, coordinator_keys=list(keys.values())),
            FindCoordinatorResponse, min_version=6)
    found = {c.key: c.node_id for c in response.coordinators if c.error_code == ErrorCode.NONE}
    return {p: found[key] for p, key in keys.items() if key in found}


def test_the_views_coordinator_is_find_coordinators_and_a_leader_moves_apart_from_it(tmp_path: Path) -> None:
    cluster = ChaosCluster(tmp_path, 3, dict(SHARE_BROKER_CONFIG))
    try:
        cluster.start()
        admin = cluster.admin()  # kept: its futures fail if it is destroyed first
        admin.create_topics([NewTopic(SHARE_TOPIC, SHARE_PARTITIONS, 3)], operation_timeout=30)[SHARE_TOPIC].result(60)
        answered: dict[int, int] = {}
        views: list[ShareView] = []

        def settled() -> bool:
            """FindCoordinator answers for every share-partition, the view names the same, every ISR full."""
            answered.update(asyncio.run(_coordinators(cluster.bootstrap)))
            views[:] = share_views(cluster.bootstrap)
            return len(answered) == SHARE_PARTITIONS and all(len(v.isr) == 3 for v in views) and \
                {v.partition: v.coordinator for v in views} == answered
        wait_for(settled, "FindCoordinator(SHARE) to answer as the view computes it", 60)

        view = views[0]
        to = next(b for b in view.replicas if b not in (view.leader, view.coordinator))
        assert move_leader(cluster.bootstrap, 0, to) is None, f"p0 not moved to {to} in {MOVE_TIMEOUT_S} s"
        moved = share_views(cluster.bootstrap)[0]
        assert (moved.leader, moved.replicas[0]) == (to, to) and sorted(moved.replicas) == sorted(view.replicas)
        assert moved.coordinator == view.coordinator
    finally:
        cluster.stop()
