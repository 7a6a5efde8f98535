"""aiokafka against the real broker: admin, produce under every codec, consume."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration.messages import CODECS, PARTITIONS, Received, messages, verify


async def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        await admin.close()


async def produce_and_consume(bootstrap: str, topic: str, codec: str) -> None:
    await create_topic(bootstrap, topic)
    sent = messages(topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                                linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=m.key, value=m.value, headers=list(m.headers),
                                       timestamp_ms=m.timestamp) for m in sent]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    received: list[Received] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        async with asyncio.timeout(60):
            while len(received) < len(sent):
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    received += [Received(r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
                                 for r in records]
    finally:
        await consumer.stop()
    verify(sent, received)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_every_codec(shared_broker, codec):
    asyncio.run(produce_and_consume(shared_broker.bootstrap, f"aiokafka-{codec}", codec))
