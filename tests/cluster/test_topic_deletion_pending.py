"""ZooKeeper mode: a topic deletion waits for every replica, as Kafka's TopicDeletionManager does. A replica on
a broker that is down makes the topic ineligible for deletion: the topic stays in /admin/delete_topics and
/brokers/topics (so CreateTopics answers TOPIC_ALREADY_EXISTS, as Kafka's validateTopicCreate does) while
clients no longer see it; the deletion resumes when that broker registers again, or under a new controller
that reads /admin/delete_topics on failover, and the znodes go only once every replica answered its
StopReplica(delete=true).

A topic being reassigned is held, as Kafka's controller marks it ineligible for deletion: it stays (served,
its move going on) until the move ends, and only then is deleted. With delete.topic.enable=false the
controller removes entries written straight into /admin/delete_topics without deleting anything. A new
controller applies both rules to what it finds in ZooKeeper.

Before this change the controller removed the znodes at once: the returning broker kept the old log and
refused the topic created again meanwhile with INCONSISTENT_TOPIC_ID.

The returning broker deletes the old log when told StopReplica(delete=true) although it hosts no replica of it
yet, as Kafka's ReplicaManager.stopReplicas does for a partition it holds no Partition for."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kazoo.client import KazooClient

from pybroker.log.checkpoint import PartitionMetadataFile
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataRequest,
    MetadataResponse,
)
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import controller_id, wait_for_full_isr
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient

TOPIC = "going"


@pytest.fixture
def zk_of() -> Iterator[list[KazooClient]]:
    clients: list[KazooClient] = []
    yield clients
    for client in clients:
        client.stop()


def _zk(cluster: Cluster, clients: list[KazooClient]) -> KazooClient:
    client = KazooClient(cluster.zk_connect)
    client.start(10)
    clients.append(client)
    return client


def _pending(zk: KazooClient) -> tuple[bool, bool]:
    """Whether /brokers/topics/TOPIC and /admin/delete_topics/TOPIC exist."""
    return zk.exists(f"/brokers/topics/{TOPIC}") is not None, zk.exists(f"/admin/delete_topics/{TOPIC}") is not None


def _create_refused(admin: AdminClient) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[0, 1]])])[TOPIC].result(30)
    error: KafkaError = refused.value.args[0]
    return error


def _grow_refused(admin: AdminClient) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions(TOPIC, 2)])[TOPIC].result(30)
    error: KafkaError = refused.value.args[0]
    return error


def _election(admin: AdminClient) -> tuple[int, str]:
    """A preferred election of TOPIC-0: its error code and message (Kafka's controller skips a topic queued for
    deletion: INVALID_TOPIC_EXCEPTION)."""
    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(timeout=30)
    error = results[TopicPartition(TOPIC, 0)]
    return error.code(), error.str()


def _auto_created(bootstrap: str) -> int:
    """The error code of a Metadata request that may auto-create TOPIC: a client retries LEADER_NOT_AVAILABLE,
    which Kafka's AutoTopicCreationManager answers when the creation finds the topic already there."""
    client = WireClient(bootstrap)
    try:
        answer = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                                                allow_auto_topic_creation=True), 9, MetadataResponse)
    finally:
        client.close()
    return int(answer.topics[0].error_code)


def _log_dir(cluster: Cluster, broker_id: int) -> Path:
    return cluster.brokers[broker_id].data_dir / "logs" / f"{TOPIC}-0"


def _delete_while_broker_1_is_down(cluster: Cluster, zk: KazooClient) -> tuple[AdminClient, Path]:
    """A topic on brokers 1 and 0 deleted while broker 1 is stopped: checks it stays pending; returns an
    admin client and broker 1's log dir of it."""
    first, returning = cluster.brokers
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 0]])])[TOPIC].result(30)
    wait_for_full_isr(cluster, TOPIC)
    old_dir = _log_dir(cluster, 1)
    # The ISR a topic is created with names every replica at once: broker 1 may still be making its log.
    eventually(lambda: PartitionMetadataFile(str(old_dir / "partition.metadata")).read() is not None,
               "broker 1 to have made its log")
    returning.stop()

    admin.delete_topics([TOPIC])[TOPIC].result(30)  # answered once the brokers stopped serving it
    assert TOPIC not in admin.list_topics(timeout=10).topics
    assert _pending(zk) == (True, True)  # broker 1 has not deleted its replica
    refused = _create_refused(admin)
    assert (refused.code(), refused.str()) == (KafkaError.TOPIC_ALREADY_EXISTS, f"Topic '{TOPIC}' already exists.")
    grow = _grow_refused(admin)  # as Kafka's KafkaApis answers CreatePartitions for a topic queued for deletion
    assert (grow.code(), grow.str()) == (KafkaError.TOPIC_EXCEPTION, "The topic is queued for deletion.")
    assert _election(admin) == (KafkaError.TOPIC_EXCEPTION, "The topic is being deleted")
    assert _auto_created(first.bootstrap) == ErrorCode.LEADER_NOT_AVAILABLE
    with pytest.raises(KafkaException) as again:  # as Kafka's KafkaApis: brokers no longer know the topic
        admin.delete_topics([TOPIC])[TOPIC].result(30)
    assert again.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    eventually(lambda: not _log_dir(cluster, 0).exists(), "the live replica to be deleted")
    assert _pending(zk) == (True, True)
    assert old_dir.is_dir()
    returning.start()
    eventually(lambda: _pending(zk) == (False, False), "the deletion to complete once broker 1 is back")
    return admin, old_dir


def test_a_deletion_waits_for_a_replica_on_a_broker_that_is_down(tmp_path: Path, zk_of: list[KazooClient]) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        admin, _ = _delete_while_broker_1_is_down(cluster, _zk(cluster, zk_of))
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[0, 1]])])[TOPIC].result(30)
        assert TOPIC in admin.list_topics(timeout=10).topics


def test_the_returning_broker_deletes_the_old_log(tmp_path: Path, zk_of: list[KazooClient]) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        admin, old_dir = _delete_while_broker_1_is_down(cluster, _zk(cluster, zk_of))
        assert not old_dir.exists()
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[0, 1]])])[TOPIC].result(30)
        assert sorted(wait_for_full_isr(cluster, TOPIC)[0][2]) == [0, 1]
        new_id = PartitionMetadataFile(str(_log_dir(cluster, 0) / "partition.metadata")).read()
        assert PartitionMetadataFile(str(old_dir / "partition.metadata")).read() == new_id


def test_a_new_controller_resumes_a_pending_deletion(tmp_path: Path, zk_of: list[KazooClient]) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster:
        controller = controller_id(cluster)
        holders = [b for b in range(3) if b != controller]
        admin = AdminClient({"bootstrap.servers": cluster.brokers[holders[0]].bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[holders])])[TOPIC].result(30)
        wait_for_full_isr(cluster, TOPIC)
        cluster.brokers[holders[1]].stop()
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        zk = _zk(cluster, zk_of)
        eventually(lambda: not _log_dir(cluster, holders[0]).exists(), "the live replica to be deleted")
        assert _pending(zk) == (True, True)

        cluster.brokers[controller].stop()  # the next controller finds the deletion in /admin/delete_topics
        eventually(lambda: controller_id(cluster) == holders[0], f"broker {holders[0]} to become controller")
        # librdkafka's admin client waits out its whole timeout for a controller its metadata names but that is
        # gone (CI); a Metadata request, as a client's refresh, points it at the new one
        eventually(lambda: admin.list_topics(timeout=10).controller_id == holders[0],
                   "the admin client's metadata to name the new controller")
        assert _pending(zk) == (True, True)
        assert _create_refused(admin).code() == KafkaError.TOPIC_ALREADY_EXISTS
        cluster.brokers[holders[1]].start()
        eventually(lambda: _pending(zk) == (False, False), "the new controller to complete the deletion")
        assert not _log_dir(cluster, holders[0]).exists()


def test_with_deletion_disabled_an_entry_written_into_zookeeper_is_removed_unapplied(
        tmp_path: Path, zk_of: list[KazooClient]) -> None:
    with running_cluster(tmp_path, brokers=1, extra={"delete.topic.enable": "false"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[0]])])[TOPIC].result(30)
        wait_for_full_isr(cluster, TOPIC)
        zk = _zk(cluster, zk_of)
        zk.create(f"/admin/delete_topics/{TOPIC}")  # as AdminZkClient.deleteTopic (TopicCommand --zookeeper)
        eventually(lambda: zk.exists(f"/admin/delete_topics/{TOPIC}") is None, "the controller to drop the entry")
        assert _pending(zk) == (True, False)
        assert TOPIC in admin.list_topics(timeout=10).topics
        assert _log_dir(cluster, 0).is_dir()

        # An entry a new controller finds is dropped too (Kafka's TopicDeletionManager.init).
        cluster.brokers[0].stop()
        zk.create(f"/admin/delete_topics/{TOPIC}")
        cluster.brokers[0].start()
        eventually(lambda: zk.exists(f"/admin/delete_topics/{TOPIC}") is None,
                   "the new controller to drop the entry")
        assert _pending(zk) == (True, False)
        assert TOPIC in admin.list_topics(timeout=10).topics
        assert _log_dir(cluster, 0).is_dir()


def _move(controller: str, target: list[int]) -> int:
    """AlterPartitionReassignments of TOPIC-0 to `target`, sent to the controller: its error code."""
    client = WireClient(controller)
    try:
        answer = client.request(AlterPartitionReassignmentsRequest(topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(name=TOPIC, partitions=[
                AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=target)])]),
            0, AlterPartitionReassignmentsResponse)
    finally:
        client.close()
    assert answer.error_code == ErrorCode.NONE
    return int(answer.responses[0].partitions[0].error_code)


def _moving(controller: str) -> dict[str, list[int]]:
    """The ongoing reassignments the controller lists: partition -> replicas."""
    client = WireClient(controller)
    try:
        answer = client.request(ListPartitionReassignmentsRequest(), 0, ListPartitionReassignmentsResponse)
    finally:
        client.close()
    return {f"{t.name}-{p.partition_index}": list(p.replicas) for t in answer.topics for p in t.partitions}


def test_a_topic_being_reassigned_is_deleted_once_its_reassignment_ends(
        tmp_path: Path, zk_of: list[KazooClient]) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster:
        controller = controller_id(cluster)
        leader, target = [b for b in range(3) if b != controller]
        at_controller = cluster.brokers[controller].bootstrap
        admin = AdminClient({"bootstrap.servers": at_controller})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[leader]])])[TOPIC].result(30)
        wait_for_full_isr(cluster, TOPIC)
        zk = _zk(cluster, zk_of)
        # The only ISR member is down: the target replica cannot catch up, the move stays in progress.
        cluster.brokers[leader].stop()
        assert _move(at_controller, [target]) == ErrorCode.NONE
        assert _moving(at_controller) == {f"{TOPIC}-0": [target, leader]}

        # Answered at once: with a timeout the answer would wait for the held deletion (test_admin_timeouts.py).
        admin.delete_topics([TOPIC], operation_timeout=0)[TOPIC].result(30)
        # A topic queued for deletion refuses to be moved (Kafka's maybeTriggerPartitionReassignment): the
        # controller has taken the deletion.
        eventually(lambda: _move(at_controller, [target]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   "the controller to queue the deletion")
        assert _moving(at_controller) == {f"{TOPIC}-0": [target, leader]}  # held: the move goes on
        assert _pending(zk) == (True, True)
        assert TOPIC in admin.list_topics(timeout=10).topics
        assert _create_refused(admin).code() == KafkaError.TOPIC_ALREADY_EXISTS
        assert _grow_refused(admin).code() == KafkaError.TOPIC_EXCEPTION
        assert _election(admin) == (KafkaError.TOPIC_EXCEPTION, "The topic is being deleted")

        # A new controller finds the deletion and the move in ZooKeeper and holds the deletion too (Kafka's
        # fetchTopicDeletionsInProgress: a topic being reassigned is ineligible for deletion).
        cluster.brokers[controller].stop()
        at_target = cluster.brokers[target].bootstrap
        eventually(lambda: controller_id(cluster) == target, "the target's broker to become the controller")
        # It lists the move once it has read ZooKeeper; the move still going on: the deletion did not end it.
        eventually(lambda: _moving(at_target) == {f"{TOPIC}-0": [target, leader]},
                   "the new controller to list the move")
        assert _move(at_target, [target]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _pending(zk) == (True, True)

        cluster.brokers[leader].start()  # the target catches up, the move ends, then the topic goes
        eventually(lambda: _pending(zk) == (False, False), "the deletion to follow the reassignment", timeout=60)
        assert _moving(at_target) == {}
        eventually(lambda: not _log_dir(cluster, leader).exists() and not _log_dir(cluster, target).exists(),
                   "both replicas to be deleted")
