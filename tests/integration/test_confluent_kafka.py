"""confluent-kafka (librdkafka) against the real broker: admin, produce under every codec, consume."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.messages import CODECS, PARTITIONS, Received, messages, verify


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=30)


def produce(bootstrap: str, topic: str, sent, **config) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5, **config})
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for message in sent:
        producer.produce(topic, key=message.key, value=message.value, headers=list(message.headers),
                         timestamp=message.timestamp, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []


def consume_all(bootstrap: str, topic: str, expected: int, partitions: int = PARTITIONS, **config) -> list[Received]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "enable.partition.eof": True, **config})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received: list[Received] = []
    at_eof: set[int] = set()
    try:
        while len(at_eof) < partitions or len(received) < expected:
            msg = consumer.poll(10)
            assert msg is not None, f"timed out after {len(received)} messages"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_eof.add(msg.partition())
                continue
            received.append(Received(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                     tuple((k, v) for k, v in (msg.headers() or [])), msg.timestamp()[1]))
    finally:
        consumer.close()
    return received


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_every_codec(shared_broker, codec):
    topic = f"confluent-{codec}"
    create_topic(shared_broker.bootstrap, topic)
    sent = messages(topic)
    produce(shared_broker.bootstrap, topic, sent, **{"compression.type": codec})
    verify(sent, consume_all(shared_broker.bootstrap, topic, len(sent)))


def test_idempotent_producer_writes_no_duplicates(shared_broker):
    topic = "confluent-idempotent"
    create_topic(shared_broker.bootstrap, topic)
    sent = messages(topic, 5000)
    produce(shared_broker.bootstrap, topic, sent, **{"enable.idempotence": True, "acks": "all",
                                                      "max.in.flight.requests.per.connection": 5,
                                                      "retries": 10, "batch.num.messages": 100})
    verify(sent, consume_all(shared_broker.bootstrap, topic, len(sent)))


def test_list_offsets_earliest_latest_and_by_time(shared_broker):
    topic = "confluent-offsets"
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    sent = messages(topic, 1000)
    produce(shared_broker.bootstrap, topic, sent, **{"batch.num.messages": 37})
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 1000)
        for index in (0, 1, 499, 999):
            found = consumer.offsets_for_times([TopicPartition(topic, 0, sent[index].timestamp)], timeout=10)
            assert found[0].offset == index
        beyond = consumer.offsets_for_times([TopicPartition(topic, 0, sent[-1].timestamp + 1)], timeout=10)
        assert beyond[0].offset == -1  # librdkafka's OFFSET_END: no record at or after that time
    finally:
        consumer.close()
