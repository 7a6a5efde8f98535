"""Incremental UpdateMetadata: brokers merge the partition states the controller sends, drop a deleted
topic's partitions (leader -2), and a topic re-created under the same name keeps none of the old one."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.eventually import eventually
from tests.cluster.conftest import running_cluster


def partitions_seen_by(bootstrap: str, topic: str) -> list[int] | None:
    """The partition ids one broker's metadata answer lists for `topic`; None when it does not know it."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    found = metadata.topics.get(topic)
    return None if found is None or found.error is not None else sorted(found.partitions)


def created(admin: AdminClient, topic: NewTopic) -> bool:
    """Whether CreateTopics made `topic`; False while the name's deletion is still pending (the controller removes
    /brokers/topics/T once every replica deleted its log, a little after brokers stop serving it: Kafka's
    DeleteTopics answers at that point too, and a client creating the name again at once may be refused)."""
    try:
        admin.create_topics([topic])[topic.topic].result(30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        return False
    return True


def test_deleted_and_recreated_topics_in_every_brokers_metadata(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("gone", 2, 3), NewTopic("kept", 2, 3)])["gone"].result(30)
        for broker in cluster.brokers:
            eventually(lambda: partitions_seen_by(broker.bootstrap, "gone") == [0, 1], "gone on every broker")
            eventually(lambda: partitions_seen_by(broker.bootstrap, "kept") == [0, 1], "kept on every broker")

        admin.delete_topics(["gone"])["gone"].result(30)
        for broker in cluster.brokers:
            eventually(lambda: partitions_seen_by(broker.bootstrap, "gone") is None, "gone gone from every broker")
            assert partitions_seen_by(broker.bootstrap, "kept") == [0, 1]

        eventually(lambda: created(admin, NewTopic("gone", 1, 3)), "gone created again")
        for broker in cluster.brokers:
            eventually(lambda: partitions_seen_by(broker.bootstrap, "gone") == [0], "the new gone, one partition")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        producer.produce("gone", b"again", partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "incremental",
                             "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition("gone", 0, 0)])
        message = eventually(lambda: (m := consumer.poll(0.5)) is not None and m.error() is None and m,
                             "the record in the re-created topic")
        assert message.value() == b"again" and message.offset() == 0
        consumer.close()
