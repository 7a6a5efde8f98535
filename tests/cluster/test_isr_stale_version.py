"""An ISR change whose ZooKeeper write landed while the controller heard of a lost connection: the state znode
holds it and the controller's context does not. The write is made here by hand, the state znode set behind the
controller's back.

- The leader's retry of that change is answered with the stored state (the controller checks what is stored
  after a version conflict); it was refused INVALID_UPDATE_VERSION, and the leader gave the change up.
- A leader whose known ISR version is stale at its own leader epoch still shrinks the ISR: no LeaderAndIsr follows
  an ISR change, so proposing again from its stale version was refused for good and its lagging followers stayed
  in the ISR (until their sessions ended and the controller removed them)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from pybroker.protocol.messages import AlterPartitionRequest
from pybroker.zk import paths as zp
from tests.cluster.conftest import running_cluster
from tests.cluster.test_alter_partition import alter
from tests.eventually import eventually

# A stopped follower leaves the ISR by lag (1 s) well before its session ends (10 s, what the test ZooKeeper
# grants at most) and the controller removes it at a new leader epoch: the shrink awaited is the leader's own.
CONFIG = {"replica.lag.time.max.ms": "1000", "zookeeper.session.timeout.ms": "10000"}
SHRINK_WAIT_S = 15.0


def _retry_of(leader: int, broker_epoch: int, known: zp.LeaderAndIsr, isr: tuple[int, ...]) -> AlterPartitionRequest:
    return AlterPartitionRequest(broker_id=leader, broker_epoch=broker_epoch, topics=[AlterPartitionRequest.TopicData(
        topic_name="stale", partitions=[AlterPartitionRequest.PartitionData(
            partition_index=0, leader_epoch=known.leader_epoch, new_isr=list(isr),
            partition_epoch=known.zk_version)])])


def test_a_change_stored_unbeknown_to_the_controller_is_answered_and_its_leader_shrinks(tmp_path: Path) -> None:
    with running_cluster(tmp_path, extra=CONFIG) as cluster:
        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            def state() -> zp.LeaderAndIsr:
                data, stat = zk.get(zp.partition_state_path("stale", 0))
                return zp.decode_partition_state(data, stat.version)

            leader = json.loads(zk.get(zp.CONTROLLER)[0])["brokerid"]  # its AlterPartition needs no stopped broker
            first, second = (b for b in range(3) if b != leader)
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic("stale", 1, replica_assignment=[[leader, first, second]],
                                          config={"min.insync.replicas": "1"})])["stale"].result(30)
            eventually(lambda: state().isr == (leader, first, second), "the full ISR")
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
            producer.produce("stale", b"replicated")
            assert producer.flush(30) == 0

            known = state()
            zk.set(zp.partition_state_path("stale", 0),
                   zp.encode_partition_state(dataclasses.replace(known, isr=(leader, first))), known.zk_version)
            broker_epoch = zk.get(zp.broker_path(leader))[1].czxid
            retried = alter(cluster.brokers[leader].port,
                            _retry_of(leader, broker_epoch, known, (leader, first))).topics[0].partitions[0]
            assert (retried.error_code, retried.isr, retried.partition_epoch) == (0, [leader, first],
                                                                                   known.zk_version + 1)
            # answered to this request, not to the leader: it still knows the ISR of before at the version of before
            followers = [cluster.brokers[b].process for b in (first, second)]
            for process in followers:
                assert process is not None
                os.kill(process.pid, signal.SIGSTOP)
            try:
                shrunk = eventually(lambda: (s := state()).isr == (leader,) and s, "the ISR to shrink to the leader",
                                    timeout=SHRINK_WAIT_S)
            finally:
                for process in followers:
                    assert process is not None
                    os.kill(process.pid, signal.SIGCONT)
            assert (shrunk.leader, shrunk.leader_epoch) == (leader, known.leader_epoch)  # the leader's own change
            assert shrunk.zk_version == known.zk_version + 2
        finally:
            zk.stop()
            zk.close()
