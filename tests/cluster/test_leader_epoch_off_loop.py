"""A LeaderAndIsr that moves the leader epoch of many existing partitions does not stall the event loop:
each partition's `leader-epoch-checkpoint` (two fsyncs) is written on the I/O threads, a request's files
together, so other clients are answered while the LeaderAndIsr waits for them; it is still answered only
once every file is durable, and the partitions then lead at the new epoch.

The LeaderAndIsr is the one the controller sends on a failover or a preferred leader election, sent here
with the controller's identity read from ZooKeeper (as `test_inter_broker_forgery` does) so that the move
applies to this broker alone, with nothing of the controller's own work in between. The stall is observed
by ordering alone: while that request is outstanding, another connection's ApiVersions requests, sent one
after another, are answered many times before its answer arrives. With the fsyncs on the loop (before this
change) one was, in runs here, against 900-1100 with the change."""

from __future__ import annotations

import select
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import RequestHeader, encode_request
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    MetadataRequest,
    MetadataResponse,
)
from tests.cluster.conftest import CHROOT, broker_overrides
from tests.cluster.test_inter_broker_forgery import real_identity
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_topic_creation_off_loop import _produce

PARTITIONS = 250
ANSWERED_WHILE_MOVING = 10
"""Far more than the 1 request answered while the writes (500 fsyncs) ran on the loop. Off the loop: 175-780 on a
quiet machine, 24 in a CI run with three test workers on two cores (the pinging client gets less of a core)."""
VERSION = 7


def _leader_and_isr(port: int, identity: tuple[int, int, int], metadata: MetadataResponse.MetadataResponseTopic,
                    epoch: int) -> LeaderAndIsrRequest:
    controller, controller_epoch, broker_epoch = identity
    return LeaderAndIsrRequest(
        controller_id=controller, controller_epoch=controller_epoch, broker_epoch=broker_epoch, type=0,
        live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=0, host_name="127.0.0.1", port=port)],
        topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
            topic_name=metadata.name, topic_id=metadata.topic_id, partition_states=[
                LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                    partition_index=index, controller_epoch=controller_epoch, leader=0, leader_epoch=epoch, isr=[0],
                    partition_epoch=1, replicas=[0], adding_replicas=[], removing_replicas=[], is_new=False)
                for index in range(PARTITIONS)])])


def test_other_clients_are_answered_while_leader_epochs_are_written(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    broker = BrokerProcess(tmp_path, broker_overrides(0, zookeeper.connect + CHROOT))
    try:
        broker.start()
        assert broker.port is not None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("moved", num_partitions=PARTITIONS, replication_factor=1)])["moved"].result(30)
        mover, other = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
        topic = other.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="moved")]), 12,
                              MetadataResponse).topics[0]
        assert len(topic.partitions) == PARTITIONS
        epoch = max(p.leader_epoch for p in topic.partitions) + 1
        assert _produce(other, "moved", PARTITIONS - 1).error_code == ErrorCode.NONE  # served, at the old epoch

        mover.correlation += 1
        header = RequestHeader(request_api_key=LeaderAndIsrRequest.API_KEY, request_api_version=VERSION,
                               correlation_id=mover.correlation, client_id="controller")
        mover.sock.sendall(encode_request(header, _leader_and_isr(broker.port, real_identity(zookeeper), topic,
                                                                  epoch), VERSION))
        answered = 0
        produce_answers = set()
        while not (mover.frames or select.select([mover.sock], [], [], 0)[0]):
            version = other.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                                    ApiVersionsResponse)
            assert version.error_code == ErrorCode.NONE
            answered += 1
            if answered % 10 == 0:  # a partition whose epoch is being written does not lead yet: retriable
                produce_answers.add(_produce(other, "moved", PARTITIONS - 1).error_code)
        moved = LeaderAndIsrResponse.decode(mover.read_frame()[5:], VERSION)  # flexible header: one tag byte
        assert [p.error_code for t in moved.topics for p in t.partition_errors] == [ErrorCode.NONE] * PARTITIONS
        assert answered >= ANSWERED_WHILE_MOVING, f"only {answered} ApiVersions answered while leaders moved"
        assert produce_answers <= {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NONE}, produce_answers
        # Answered once every partition leads at the new epoch, its checkpoint on disk.
        assert _produce(other, "moved", PARTITIONS - 1).error_code == ErrorCode.NONE
        checkpoints = [LeaderEpochCheckpointFile(str(tmp_path / "logs" / f"moved-{index}" / LEADER_EPOCH_CHECKPOINT))
                       .read() for index in range(PARTITIONS)]
        assert all(entries and max(entries) == epoch for entries in checkpoints), checkpoints[:3]
        assert not [line for line in broker.log_lines if "Traceback" in line or " ERROR " in line]
        mover.close()
        other.close()
    finally:
        broker.kill()
        zookeeper.stop()
