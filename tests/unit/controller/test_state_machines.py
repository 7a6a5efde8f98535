"""Partition states and the replica transitions that need StopReplica, read off a controller context."""

from __future__ import annotations

from pybroker.zk import paths as zp
from pybroker.controller.context import ControllerContext
from pybroker.controller.partition_state import PartitionState, partition_state
from pybroker.controller.replica_state import offline_followers, removed_replicas


def broker(broker_id: int) -> zp.BrokerRegistration:
    return zp.BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, None, epoch=100 + broker_id)


def context() -> ControllerContext:
    ctx = ControllerContext(brokers={b: broker(b) for b in (1, 2, 3)})
    ctx.assignments["t"] = zp.TopicAssignment({0: (1, 2), 1: (2, 3), 2: (3, 1)}, None)
    ctx.states[("t", 0)] = zp.LeaderAndIsr(1, 3, (1, 2), 1, 0)
    ctx.states[("t", 1)] = zp.LeaderAndIsr(2, 4, (2, 3), 1, 0)
    ctx.states[("t", 2)] = zp.LeaderAndIsr(zp.NO_LEADER, 5, (3,), 1, 0)
    return ctx


def test_a_partition_is_online_while_its_leader_is_registered() -> None:
    ctx = context()
    assert partition_state(ctx, ("t", 0)) == PartitionState.ONLINE
    assert partition_state(ctx, ("t", 2)) == PartitionState.OFFLINE
    assert partition_state(ctx, ("t", 9)) == PartitionState.NON_EXISTENT
    del ctx.brokers[1]
    assert partition_state(ctx, ("t", 0)) == PartitionState.OFFLINE


def test_a_broker_shutting_down_stops_the_replicas_it_follows_and_keeps_their_logs() -> None:
    stops = offline_followers(context(), 3)
    assert list(stops) == [3]
    assert [(s.partition_index, s.leader_epoch, s.delete_partition) for s in stops[3]["t"]] == \
        [(1, 4, False), (2, 5, False)]
    leads_all = context()
    leads_all.states[("t", 2)] = zp.LeaderAndIsr(1, 6, (3, 1), 1, 1)
    assert offline_followers(leads_all, 1) == {}  # it leads every replica it hosts: nothing to stop


def test_replicas_a_reassignment_dropped_are_deleted() -> None:
    stops = removed_replicas(context(), ("t", 1), (2,))
    assert [(s.partition_index, s.leader_epoch, s.delete_partition) for s in stops[2]["t"]] == [(1, 4, True)]


def test_context_finds_the_partitions_on_brokers_and_the_electable_brokers() -> None:
    ctx = context()
    assert ctx.partitions_on({1}) == {("t", 0), ("t", 2)}
    ctx.shutting_down.add(2)
    assert ctx.electable() == {1, 3}
    ctx.forget_topic("t")
    assert ctx.states == {} and ctx.assignments == {}
