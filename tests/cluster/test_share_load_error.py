"""A share-partition whose first load fails is answered with the partition's error in ShareFetch, and read again by
the next fetch (Kafka's SharePartitionManager drops a share-partition whose initialization failed and adds the
partition to the fetch's erroneous ones, its error mapped by SharePartition.fetchPersisterError: a share coordinator
not available, loading or moved is COORDINATOR_NOT_AVAILABLE).

Here the share coordinator (C, leader of ``__share_group_state``'s one partition, min ISR 2) cannot commit a write
while its follower is stopped (SIGSTOP): the leader of the topic (C too, so the persister's call is in-process)
reads the share-partition, initialized without a start offset, and must write the one "latest" gives before serving;
that write times out. Before, the partition was answered without an error, as if it had nothing to deliver.
"""

from __future__ import annotations

import os
import signal
import uuid

from pybroker.common.topic import topic_id_to_string
from pybroker.protocol.error_codes import ErrorCode
from tests.cluster.conftest import running_cluster
from tests.cluster.test_cluster import create_topic, wait_for_full_isr
from tests.cluster.test_share_failover import (
    GROUP,
    SHARE_KEY,
    TOPIC,
    _acquire,
    _broker,
    _coordinator,
    _join,
    _open,
    _topic_id,
)
from tests.integration.test_share_groups_wire import _fetch, _produce


def test_a_failed_first_load_is_the_partitions_error_and_the_next_fetch_loads_it_again(tmp_path) -> None:
    extra = {"share.coordinator.state.topic.num.partitions": "1",
             "share.coordinator.state.topic.replication.factor": "2", "share.coordinator.state.topic.min.isr": "2",
             "share.coordinator.write.timeout.ms": "1000"}
    with running_cluster(tmp_path, extra=extra) as cluster:
        coordinator = _coordinator(cluster, f"{GROUP}:{topic_id_to_string(uuid.uuid4())}:0", SHARE_KEY)
        _, replicas, _ = wait_for_full_isr(cluster, "__share_group_state")[0]
        follower = next(b for b in replicas if b != coordinator)
        other = next(b for b in range(3) if b not in replicas)
        create_topic(cluster, TOPIC, 1, assignment=[[coordinator, other]])
        wait_for_full_isr(cluster, TOPIC)
        client = _broker(cluster, coordinator)
        topic_id = _topic_id(client, TOPIC)
        _join(cluster, "m1")  # the share-partition's state is initialized (committed) before it is assigned

        stopped = cluster.brokers[follower].process
        assert stopped is not None
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            first = _fetch(client, GROUP, "m1", 0, topic_id)
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        assert first.error_code == ErrorCode.NONE
        assert [(p.partition_index, p.error_code, p.acquired_records) for t in first.responses
                for p in t.partitions] == [(0, ErrorCode.COORDINATOR_NOT_AVAILABLE, [])]

        assert _fetch(client, GROUP, "m1", -1, None).error_code == ErrorCode.NONE  # closes m1's session
        epoch, stored = _open(client, "m1", topic_id, client)  # loaded again, its start offset stored
        assert stored == (0, [])
        _produce(client, TOPIC, 3)
        acquired, _ = _acquire(client, "m1", topic_id, epoch)
        assert acquired == [(0, 2, 1)]
        client.close()
