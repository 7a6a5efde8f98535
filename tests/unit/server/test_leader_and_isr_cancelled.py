"""A LeaderAndIsr whose replicas wait for their new leader epoch's checkpoint (`RoleChanges.apply_role_later`)
lets them lead although its request is cancelled (the controller's connection closed) and the collector runs
meanwhile: the step that leads them runs to its end (`run_to_end`, which also keeps it referenced; the loop keeps
tasks only weakly). Before that change this passed as well: while its write waits, the step stays referenced
through the I/O executor's queue. The I/O thread is held on a gate so the request is cancelled while the write
still waits, without timing."""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Mapping

import pytest

from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.protocol.messages import LeaderAndIsrRequest
from pybroker.replication.errors import NotLeaderError
from pybroker.replication.manager import PartitionRole, ReplicaManager
from pybroker.replication.partition import epoch_checkpoint_of
from pybroker.server.handlers.inter_broker import leader_and_isr
from tests.unit.replication.held_io import turns_until, with_held_io

CONFIG = LogConfig()
TOPIC_ID = uuid.UUID(int=11)
BROKER_EPOCH = 5


class _Metadata:
    """The part of this broker's ZooKeeper metadata a LeaderAndIsr reads (no ZooKeeper in a unit test)."""
    controller_epoch = 0
    broker_epoch = BROKER_EPOCH

    async def configs_for(self, topic: str) -> Mapping[str, str]:
        return {}


def _context(replicas: ReplicaManager, io: IoExecutor) -> SimpleNamespace:
    services = SimpleNamespace(zk_mode=SimpleNamespace(metadata=_Metadata()), io=io, replica_manager=replicas,
                               log_manager=replicas.log_manager, broker_id=0, open_files=None,
                               topic_configs=SimpleNamespace(log_config=lambda _configs: CONFIG,
                                                             min_insync_replicas=lambda _configs: 1))
    return SimpleNamespace(services=services)


def _lead_at(epoch: int) -> LeaderAndIsrRequest:
    state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name="t", partition_index=0, controller_epoch=1, leader=0, leader_epoch=epoch, isr=[0, 1],
        partition_epoch=epoch, replicas=[0, 1])
    return LeaderAndIsrRequest(controller_id=1, controller_epoch=1, broker_epoch=BROKER_EPOCH, live_leaders=[],
                               topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                                   topic_name="t", topic_id=TOPIC_ID, partition_states=[state])])


def test_a_cancelled_request_s_replica_still_leads_at_its_new_epoch(tmp_path: Path) -> None:
    async def scenario(replicas: ReplicaManager, io: IoExecutor, gate: threading.Event) -> None:
        for epoch, leader in ((1, 0), (2, 1)):  # led once, then following: leading again writes epoch 3
            replicas.apply_role(PartitionRole("t", 0, TOPIC_ID, BrokerId(leader), LeaderEpoch(epoch), (0, 1), (0, 1),
                                              epoch, 1), None, config=CONFIG, min_insync_replicas=1)
        request = asyncio.ensure_future(leader_and_isr.unbounded(_context(replicas, io), _lead_at(3)))
        partition = replicas.partition("t", 0)
        await turns_until(lambda: partition.leader_epoch == 3, "the replica to be fenced at epoch 3")
        with pytest.raises(NotLeaderError):
            replicas.leader_partition("t", 0)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        del request
        gc.collect()
        gate.set()
        await io.run(lambda: None)  # after the checkpoint write, on the one I/O thread
        await turns_until(lambda: partition.is_leader, "the replica to lead")
        assert replicas.leader_partition("t", 0) is partition and partition.leader_epoch == 3
        assert epoch_checkpoint_of(partition.log).read() == {3: 0}

    asyncio.run(with_held_io(tmp_path, CONFIG, lambda _logs, io: io, scenario))
