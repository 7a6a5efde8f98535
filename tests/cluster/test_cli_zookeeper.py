"""`pybroker topics --zookeeper` against the real three-broker cluster: the znodes it writes are ones the
controller acts on (leaders, new partitions, deletion), and its describe matches --bootstrap-server's. A
topic whose deletion is pending is marked in --list and --describe, as the old ZooKeeper TopicCommand did."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from tests.eventually import eventually
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import consume, controller_id, partition_states, wait_for_full_isr
from tests.integration.test_cli_topics import failed, ok, run

TOPIC = "zk-made"


def zk_topics(cluster: Cluster, *args: str):  # type: ignore[no-untyped-def]
    return run("topics", "--zookeeper", cluster.zk_connect, *args)


def bootstrap_topics(cluster: Cluster, *args: str):  # type: ignore[no-untyped-def]
    return run("topics", "--bootstrap-server", cluster.bootstrap, *args)


def test_topic_lifecycle_through_zookeeper(cluster: Cluster) -> None:
    assert ok(zk_topics(cluster, "--create", "--topic", TOPIC, "--partitions", "3", "--replication-factor", "2",
                        "--config", "retention.ms=86400000")) == [f"Created topic {TOPIC}."]
    wait_for_full_isr(cluster, TOPIC)

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(TOPIC, f"v-{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    received = consume(cluster, TOPIC, 3, 30)
    assert sorted(v for values in received.values() for v in values) == sorted(f"v-{i}".encode() for i in range(30))

    described = ok(zk_topics(cluster, "--describe", "--topic", TOPIC))
    assert described == ok(bootstrap_topics(cluster, "--describe", "--topic", TOPIC))
    assert described[0].startswith(f"Topic: {TOPIC}\tTopicId: ")
    assert described[0].endswith("\tPartitionCount: 3\tReplicationFactor: 2\tConfigs: retention.ms=86400000")
    assert TOPIC in ok(zk_topics(cluster, "--list"))
    assert "already exists" in failed(zk_topics(cluster, "--create", "--topic", TOPIC, "--partitions", "1",
                                                "--replication-factor", "1"))

    assert ok(zk_topics(cluster, "--alter", "--topic", TOPIC, "--partitions", "4")) == []
    eventually(lambda: len(partition_states(cluster, TOPIC)) == 4, "the fourth partition")
    wait_for_full_isr(cluster, TOPIC)
    assert ok(zk_topics(cluster, "--describe", "--topic", TOPIC)) == \
        ok(bootstrap_topics(cluster, "--describe", "--topic", TOPIC))
    unknown_broker = ("--alter", "--topic", TOPIC, "--partitions", "5", "--replica-assignment", "0:1,1:2,2:0,0:1,1:7")
    refused = failed(zk_topics(cluster, *unknown_broker))
    assert refused == failed(bootstrap_topics(cluster, *unknown_broker))  # the tool and the broker plan alike
    assert refused.endswith("Unknown broker(s) in replica assignment: [7]")

    assert ok(zk_topics(cluster, "--delete", "--topic", TOPIC)) == [
        f"Topic {TOPIC} is marked for deletion.",
        "Note: This will have no impact if delete.topic.enable is not set to true."]
    eventually(lambda: TOPIC not in ok(bootstrap_topics(cluster, "--list")), "the topic's deletion")
    # its znodes go once every replica answered the controller's StopReplica, a little later
    eventually(lambda: TOPIC not in ok(zk_topics(cluster, "--list")), "the topic's znodes to go")


def test_zookeeper_and_bootstrap_exclude_each_other(cluster: Cluster) -> None:
    assert "Only one of --bootstrap-server or --zookeeper" in failed(
        run("topics", "--zookeeper", cluster.zk_connect, "--bootstrap-server", cluster.bootstrap, "--list"))


def test_a_pending_deletion_is_marked_for_deletion(tmp_path: Path) -> None:
    pending = "pending"
    with running_cluster(tmp_path, brokers=2) as cluster:
        controller = controller_id(cluster)
        away = 1 - controller
        assert ok(zk_topics(cluster, "--create", "--topic", pending, "--replica-assignment",
                            f"{controller}:{away}")) == [f"Created topic {pending}."]
        wait_for_full_isr(cluster, pending)
        cluster.brokers[away].stop()  # its replica not deleted, the deletion stays pending
        assert ok(zk_topics(cluster, "--delete", "--topic", pending)) == [
            f"Topic {pending} is marked for deletion.",
            "Note: This will have no impact if delete.topic.enable is not set to true."]
        eventually(lambda: pending not in ok(bootstrap_topics(cluster, "--list")), "brokers to stop serving it")

        assert f"{pending} - marked for deletion" in ok(zk_topics(cluster, "--list"))
        topic, partition = ok(zk_topics(cluster, "--describe", "--topic", pending))
        assert topic.startswith(f"Topic: {pending}\t")
        assert topic.endswith("\tReplicationFactor: 2\tConfigs: \tMarkedForDeletion: true")
        assert partition.startswith(f"\tTopic: {pending}\tPartition: 0\t")
        assert partition.endswith("\tMarkedForDeletion: true")
        assert ok(zk_topics(cluster, "--delete", "--topic", pending)) == [
            f"Topic {pending} is already marked for deletion."]

        cluster.brokers[away].start()
        eventually(lambda: pending not in ok(zk_topics(cluster, "--list")), "the deletion to complete")
