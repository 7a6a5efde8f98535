"""A leader whose known ISR version is stale at its own leader epoch still shrinks the ISR. The state znode can
hold an ISR change the leader never heard of: the controller's ZooKeeper write landed but answered with a lost
connection, and the leader's retry was refused INVALID_UPDATE_VERSION (the controller re-read the state). No
LeaderAndIsr follows an ISR change, so a leader proposing again from its stale version was refused for good and
its lagging followers stayed in the ISR (until their sessions ended and the controller removed them). The
write whose answer was lost is made here by hand: the state znode set behind the controller's back."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from pybroker.zk import paths as zp
from tests.cluster.conftest import running_cluster
from tests.eventually import eventually

# A stopped follower leaves the ISR by lag (1 s) long before its session ends (30 s) and the controller
# removes it: the shrink awaited is the leader's.
CONFIG = {"replica.lag.time.max.ms": "1000", "zookeeper.session.timeout.ms": "30000"}
SHRINK_WAIT_S = 15.0


def test_a_leader_with_a_stale_isr_version_takes_the_stored_one_and_shrinks(tmp_path: Path) -> None:
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
