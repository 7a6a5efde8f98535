"""kafka-python against the real broker: admin, produce under every codec, consume."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.integration.messages import CODECS, PARTITIONS, Received, messages, verify


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def consume_all(bootstrap: str, topic: str, expected: int) -> list[Received]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    received = []
    try:
        for msg in consumer:
            received.append(Received(msg.partition, msg.offset, msg.key, msg.value, tuple(msg.headers),
                                     msg.timestamp))
            if len(received) >= expected:
                break
    finally:
        consumer.close()
    return received


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_every_codec(shared_broker, codec):
    topic = f"kafka-python-{codec}"
    create_topic(shared_broker.bootstrap, topic)
    sent = messages(topic)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                             compression_type=None if codec == "none" else codec, linger_ms=5)
    futures = [producer.send(topic, key=m.key, value=m.value, headers=list(m.headers), timestamp_ms=m.timestamp)
               for m in sent]
    producer.flush(60)
    for future in futures:
        future.get(timeout=30)
    producer.close()
    verify(sent, consume_all(shared_broker.bootstrap, topic, len(sent)))


def test_offsets_for_times_and_end_offsets(shared_broker):
    topic = "kafka-python-offsets"
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    sent = messages(topic, 500)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, batch_size=2000)
    for m in sent:
        producer.send(topic, key=m.key, value=m.value, headers=list(m.headers), timestamp_ms=m.timestamp)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 500}
        found = consumer.offsets_for_times({tp: sent[321].timestamp})
        assert found[tp].offset == 321 and found[tp].timestamp == sent[321].timestamp
        assert consumer.offsets_for_times({tp: sent[-1].timestamp + 1})[tp] is None
    finally:
        consumer.close()
