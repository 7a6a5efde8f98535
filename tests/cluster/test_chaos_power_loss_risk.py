"""The nemesis's power-loss safety check against a real ZooKeeper holding what pybroker's controller
writes: a partition whose state waits for a longest-log election names its members only as candidates,
so powering one off is a risk even though every member registered before that state was written.

Chaos round 8103: brokers 1 and 2 lost power (their unflushed logs cut to nothing), then broker 0 was
killed; all three registered again, and the controller's failover wrote every partition leaderless with
ISR [2, 0, 1] and ``elect_longest_log`` (only the members' logs can tell which kept the records). The
check took that write, newer than the registrations, for brokers 1 and 2 having rejoined, powered off
broker 0, the only one that held the records, and the longest-log election that followed found every
log empty: 407 acknowledged records lost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from kazoo.client import KazooClient

from chaos.cluster import CHROOT, ChaosCluster
from pybroker.zk import paths as zp
from tests.cluster.zookeeper import ZooKeeperServer

STATE = CHROOT + zp.partition_state_path("queue", 0)


class Running:
    """Stands in for chaos.cluster.Broker: only the fields the check reads."""

    def __init__(self, broker_id: int):
        self.broker_id, self.alive, self.paused = broker_id, True, False


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[ChaosCluster, KazooClient]]:
    server = ZooKeeperServer(tmp_path / "zookeeper").start()
    cluster = ChaosCluster(tmp_path, zookeeper=server)
    cluster.brokers = [Running(b) for b in range(3)]  # type: ignore[misc]
    zk = KazooClient(server.connect)  # the harness reads under its chroot
    zk.start(10)
    try:
        zk.ensure_path(CHROOT + zp.BROKER_IDS)
        zk.create(STATE, zp.encode_partition_state(zp.LeaderAndIsr(2, zp.LeaderEpoch(0), (2, 0, 1), 1)),
                  makepath=True)
        yield cluster, zk
    finally:
        zk.stop()
        zk.close()
        server.stop()


def _register_all_after(cluster: ChaosCluster, zk: KazooClient, power_lost: list[int]) -> None:
    for broker in power_lost:
        cluster.killed_at[broker] = time.time()
    time.sleep(0.01)  # ZooKeeper's times are in milliseconds: the registrations come strictly later
    for broker in range(3):
        zk.create(CHROOT + zp.broker_path(broker), b"{}")


def test_a_member_of_a_state_waiting_for_a_longest_log_election_is_not_powered_off(setup) -> None:
    cluster, zk = setup
    _register_all_after(cluster, zk, power_lost=[1, 2])
    waiting = zp.LeaderAndIsr(zp.NO_LEADER, zp.LeaderEpoch(1), (2, 0, 1), 2, elect_longest_log=True)
    time.sleep(0.01)
    zk.set(STATE, zp.encode_partition_state(waiting))
    risk = cluster.power_loss_risk([cluster.brokers[0]])  # type: ignore[list-item]
    assert risk is not None and "queue-0" in risk
    assert cluster.power_loss_risk([cluster.brokers[1]]) is not None  # which member kept it, only logs tell


def test_the_elected_state_after_the_comparison_names_members_that_hold_the_records(setup) -> None:
    """Once the longest log leads, the members level with it are in sync: another one may lose power."""
    cluster, zk = setup
    _register_all_after(cluster, zk, power_lost=[1])
    time.sleep(0.01)
    zk.set(STATE, zp.encode_partition_state(zp.LeaderAndIsr(0, zp.LeaderEpoch(2), (0, 2), 2)))
    assert cluster.power_loss_risk([cluster.brokers[0]]) is None  # broker 2 holds it
    assert cluster.power_loss_risk([cluster.brokers[1]]) is None  # not a member: its log is not counted on
    assert cluster.power_loss_risk([cluster.brokers[0], cluster.brokers[2]]) is not None
