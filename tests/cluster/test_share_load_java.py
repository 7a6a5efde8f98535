"""Apache Kafka's 4.2 KafkaShareConsumer polls through a share-partition whose first load fails for a while.

The 4.2 client's ShareFetchCollector throws IllegalStateException from poll() for a partition error it does not
expect (it refreshes metadata for NOT_LEADER_OR_FOLLOWER and the like, logs UNKNOWN_SERVER_ERROR, and throws for
anything else, COORDINATOR_NOT_AVAILABLE among them). Kafka's ShareFetch does not wait for a share-partition still
initializing beyond its max wait (requests that find it initializing skip it: LEADER_NOT_AVAILABLE), and a failed
initialization is the error of the request that started it only if it came within that request's wait; pybroker
used to wait for the load (up to share.coordinator.write.timeout.ms) and answer its failure, which the client threw.

As in test_share_load_error.py, the share coordinator (leader of ``__share_group_state``'s one partition, min ISR 2)
cannot commit the start offset a first load writes while its follower is stopped (SIGSTOP); the topic is led there
too. The group's coordinator is elsewhere (``__consumer_offsets`` has one replica per partition), so the consumer
joins while the follower is stopped; the share-partition's state was initialized before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from pybroker.common.topic import topic_id_to_string
from tests.cluster.conftest import running_cluster
from tests.cluster.test_cluster import create_topic, wait_for_full_isr
from tests.cluster.test_share_failover import (
    GROUP_KEY,
    _broker,
    _coordinator,
    coordinator_and_follower,
    one_commit_needs_two,
)
from tests.eventually import eventually
from tests.integration.java_scenarios import JAVA_SOURCES, _parse
from tests.integration.test_java_client_42 import java42_classpath  # noqa: F401 (the compiled v42 scenarios)
from tests.integration.test_share_groups_confluent import _produce
from tests.integration.test_share_groups_wire import _join

TOPIC = "share-load-java"
SCENARIO = "poll_through_a_share_load"
RECORDS = 3


def test_the_java_share_consumer_polls_through_a_share_partition_load_that_fails_for_a_while(
        tmp_path, java42_classpath: str) -> None:  # noqa: F811
    extra = {**one_commit_needs_two(1500), "offsets.topic.replication.factor": "1"}
    with running_cluster(tmp_path, extra=extra) as cluster:
        share_coordinator, follower = coordinator_and_follower(cluster, f"g:{topic_id_to_string(uuid.uuid4())}:0")
        other = next(b for b in range(3) if b not in (share_coordinator, follower))
        group = next(g for g in (f"share-load-java-{i}" for i in range(100))
                     if _coordinator(cluster, g, GROUP_KEY) != follower)
        create_topic(cluster, TOPIC, 1, assignment=[[share_coordinator, other]])
        wait_for_full_isr(cluster, TOPIC)
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        _produce(cluster.bootstrap, TOPIC, [f"r{i}" for i in range(RECORDS)])
        wire = _broker(cluster, _coordinator(cluster, group, GROUP_KEY))
        _join(wire, group, "m1", [TOPIC])  # its state initialized (committed) before the follower stops
        wire.close()

        log = cluster.brokers[share_coordinator].log_lines
        seen = len(log)
        stopped = cluster.brokers[follower].process
        assert stopped is not None
        bootstrap = ",".join(b.bootstrap for i, b in enumerate(cluster.brokers) if i != follower)
        os.kill(stopped.pid, signal.SIGSTOP)
        java = subprocess.Popen(
            ["java", f"-Dlog4j2.configurationFile={JAVA_SOURCES / 'log4j2.properties'}", f"-Dshare.group={group}",
             f"-Dshare.topic={TOPIC}", f"-Dshare.records={RECORDS}", "-cp", java42_classpath, "Scenarios",
             bootstrap, SCENARIO], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            try:
                eventually(lambda: any(f"of {TOPIC}-0 was not loaded" in line for line in log[seen:]),
                           "the consumer's fetch to start the share-partition's load, and the load to fail",
                           timeout=60)
            finally:
                os.kill(stopped.pid, signal.SIGCONT)
            stdout, stderr = java.communicate(timeout=90)
        finally:
            if java.poll() is None:
                java.kill()
                java.communicate()
        outcome = _parse(stdout).get(SCENARIO)
        assert outcome is not None, stderr[-5000:]
        assert outcome.passed, f"{outcome.detail}\n--- client log ---\n{stderr[-3000:]}"
