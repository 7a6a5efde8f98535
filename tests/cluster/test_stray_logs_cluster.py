"""ZooKeeper mode: a broker that holds the log of a deleted topic refuses the LeaderAndIsr of the topic created
again under the same name with INCONSISTENT_TOPIC_ID, as Kafka's ZooKeeper-mode brokers do,
logging Kafka's state-change error; the old log stays untouched and the other replica serves the topic. Once
the operator moves the directory aside (``-stray``) and restarts the broker, it replicates the new topic.

Before this change the refusal was KAFKA_STORAGE_ERROR, which the controller takes for a failed log dir
("Replicas of reborn-0 on broker 1 are offline"), and the broker logged nothing about the topic id.

The controller no longer finishes a deletion while a replica's broker is down (test_topic_deletion_pending.py),
so the old log is put back by hand here, as a restore from a backup or a disk re-attached would bring it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from pybroker.common.topic import topic_id_to_string
from pybroker.log.checkpoint import PartitionMetadataFile
from pybroker.protocol.error_codes import ErrorCode
from tests.cluster.conftest import running_cluster
from tests.cluster.test_cluster import partition_states, wait_for_full_isr
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient
from tests.integration.test_topic_creation_off_loop import _produce

TOPIC = "reborn"


def _produced_on(bootstrap: str) -> int:
    """The base offset of one record produced to partition 0 through ``bootstrap`` once it leads it."""
    client = WireClient(bootstrap)
    try:
        answer = eventually(lambda: (a := _produce(client, TOPIC, 0)).error_code == ErrorCode.NONE and a,
                            f"{TOPIC}-0 to take a record through {bootstrap}")
        return answer.base_offset
    finally:
        client.close()


def test_a_log_left_from_a_deleted_topic_is_refused_inconsistent_topic_id_and_kept(tmp_path: Path) -> None:
    # The refusing replica leaves the new topic's ISR after replica.lag.time.max.ms, shortened here.
    with running_cluster(tmp_path, brokers=2, extra={"replica.lag.time.max.ms": "4000"}) as cluster:
        first, returning = cluster.brokers
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 0]])])[TOPIC].result(30)
        for expected in range(3):
            assert _produced_on(returning.bootstrap) == expected
        old_dir = returning.data_dir / "logs" / f"{TOPIC}-0"
        old_id = PartitionMetadataFile(str(old_dir / "partition.metadata")).read()
        assert old_id is not None
        returning.stop()
        kept = tmp_path / "kept"
        shutil.copytree(old_dir, kept)
        returning.start()
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            eventually(lambda: zk.exists(f"/brokers/topics/{TOPIC}") is None, f"{TOPIC} to be deleted")
        finally:
            zk.stop()
        returning.stop()
        shutil.copytree(kept, old_dir)
        returning.start()
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[0, 1]])])[TOPIC].result(30)
        new_dir = first.data_dir / "logs" / f"{TOPIC}-0"
        new_id = eventually(lambda: PartitionMetadataFile(str(new_dir / "partition.metadata")).read(),
                            "the new topic's log on broker 0")
        refusal = (f"[Broker id=1] Topic ID in memory: {topic_id_to_string(old_id)} does not match the topic ID for "
                   f"partition {TOPIC}-0 received: {topic_id_to_string(new_id)}.")
        assert returning.wait_for_log(re.escape(refusal), timeout=30), "\n".join(returning.log_lines[-20:])
        eventually(lambda: partition_states(cluster, TOPIC)[0] == (0, [0, 1], [0]),
                   "the refusing replica to leave the ISR")
        assert _produced_on(first.bootstrap) == 0  # the other replica serves the new topic
        assert PartitionMetadataFile(str(old_dir / "partition.metadata")).read() == old_id  # left as it was
        assert (old_dir / "00000000000000000000.log").stat().st_size > 0
        assert not any("offline" in line for line in first.log_lines if f"{TOPIC}-0" in line)

        returning.stop()  # what docs/troubleshooting.md tells the operator to do
        stray = old_dir.with_name(f"{TOPIC}-0.moved-by-hand-stray")
        old_dir.rename(stray)
        returning.start()
        assert wait_for_full_isr(cluster, TOPIC)[0][2] in ([0, 1], [1, 0])
        assert (stray / "00000000000000000000.log").stat().st_size > 0
        assert PartitionMetadataFile(str(old_dir / "partition.metadata")).read() == new_id
