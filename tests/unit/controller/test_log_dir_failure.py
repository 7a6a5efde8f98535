"""Log dir failures in the controller: the notification's format both ways, and the context's offline replicas
that the offline election treats as dead until their broker registers again."""

from __future__ import annotations

from pybroker.zk import paths as zp
from pybroker.controller.context import ControllerContext
from pybroker.controller.election import offline_election
from pybroker.controller.log_dir_failure import decode_log_dir_event
from pybroker.server.log_dir_events import encode_log_dir_event


def test_the_notification_is_kafkas_json_and_the_controller_reads_its_broker():
    assert encode_log_dir_event(3) == b'{"version":1,"broker":3,"event":1}'
    assert decode_log_dir_event(encode_log_dir_event(3)) == 3


def registration(broker_id: int, epoch: int) -> zp.BrokerRegistration:
    return zp.BrokerRegistration(broker_id, "localhost", 9092 + broker_id, None, epoch=epoch)


def test_offline_replicas_count_until_the_broker_registers_again():
    ctx = ControllerContext(brokers={0: registration(0, 10), 1: registration(1, 11)})
    assert ctx.mark_offline(0, {("t", 1)})
    assert not ctx.mark_offline(0, {("t", 1)})  # nothing new: no second election
    assert (ctx.offline_on(("t", 1)), ctx.offline_on(("t", 0))) == ({0}, set())
    state = zp.LeaderAndIsr(leader=0, leader_epoch=4, isr=(0, 1), controller_epoch=1, zk_version=3)
    moved = offline_election(state, (0, 1), set(ctx.brokers) - ctx.offline_on(("t", 1)), 2)
    assert moved is not None and (moved.leader, moved.isr, moved.leader_epoch) == (1, (1,), 5)
    ctx.brokers[0] = registration(0, 20)  # restarted: its log dirs are back
    assert ctx.offline_on(("t", 1)) == set()
    assert ctx.mark_offline(0, {("t", 1)})
