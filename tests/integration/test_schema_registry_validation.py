"""Broker-side schema validation, opt-in per topic (confluent.value.schema.validation): records
without a schema id registered under the topic's subject are refused with INVALID_RECORD and each
record's index (KIP-467); topics that do not ask accept anything."""

from __future__ import annotations

import asyncio
import json
from typing import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from pybroker.client.cluster import KafkaClient
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.records import RecordInput, build_batch
from pybroker.testing import EmbeddedBroker

SCHEMA = json.dumps({"type": "record", "name": "Reading", "namespace": "iot",
                     "fields": [{"name": "celsius", "type": "double"}]})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("validation"), schema_registry=True) as embedded:
        embedded.create_topic("readings", config={"confluent.value.schema.validation": "true"})
        embedded.create_topic("by-record-name", config={
            "confluent.value.schema.validation": "true",
            "confluent.value.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy"})
        embedded.create_topic("free")
        yield embedded


def produce_raw(broker: EmbeddedBroker, topic: str, values: list[bytes | None]) -> ProduceResponse.PartitionProduceResponse:
    async def send() -> ProduceResponse.PartitionProduceResponse:
        async with KafkaClient(broker.bootstrap_servers) as client:
            batch = build_batch([RecordInput(None, value) for value in values])
            request = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
            # v12: the last version that names topics (v13 names them by id)
            response = await (await client.connect()).send_at(request, 12, ProduceResponse)
            return response.responses[0].partition_responses[0]

    return asyncio.run(send())


def framed(schema_id: int, payload: bytes = b"\x00" * 8) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def test_records_of_the_registered_schema_pass_and_others_are_named(broker: EmbeddedBroker) -> None:
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    serializer = AvroSerializer(client, SCHEMA)
    good = serializer({"celsius": 21.5}, SerializationContext("readings", MessageField.VALUE))
    schema_id = int.from_bytes(good[1:5], "big")
    other_id = client.register_schema("elsewhere-value", Schema(json.dumps(
        {"type": "record", "name": "Other", "fields": []}), "AVRO"))
    accepted = produce_raw(broker, "readings", [good, good])
    assert accepted.error_code == ErrorCode.NONE
    refused = produce_raw(broker, "readings", [good, b"plain text", framed(other_id), framed(98765), good])
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in refused.record_errors] == [1, 2, 3]
    assert "magic byte" in refused.record_errors[0].batch_index_error_message
    assert "readings-value" in refused.record_errors[1].batch_index_error_message
    assert schema_id != other_id


def test_record_name_strategy(broker: EmbeddedBroker) -> None:
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    schema_id = client.register_schema("iot.Reading", Schema(SCHEMA, "AVRO"))
    assert produce_raw(broker, "by-record-name", [framed(schema_id)]).error_code == ErrorCode.NONE
    wrong = client.register_schema("by-record-name-value", Schema(json.dumps(
        {"type": "record", "name": "Misnamed", "fields": []}), "AVRO"))
    assert produce_raw(broker, "by-record-name", [framed(wrong)]).error_code == ErrorCode.INVALID_RECORD


def test_topics_without_validation_accept_anything(broker: EmbeddedBroker) -> None:
    assert produce_raw(broker, "free", [b"anything", None]).error_code == ErrorCode.NONE


def test_librdkafka_producer_sees_invalid_record(broker: EmbeddedBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "message.timeout.ms": 10000})
    outcome: list[object] = []
    producer.produce("readings", b"not framed", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert outcome and outcome[0] is not None and outcome[0].code() == ErrorCode.INVALID_RECORD


def test_validation_configs_are_checked_and_described(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    bad = admin.create_topics([NewTopic("bad-strategy", 1, 1, config={
        "confluent.value.subject.name.strategy": "NoSuchStrategy"})])["bad-strategy"]
    with pytest.raises(KafkaException) as refused:
        bad.result(timeout=30)
    assert "NoSuchStrategy" in str(refused.value)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "readings")])
    entries = next(iter(described.values())).result(timeout=30)
    assert entries["confluent.value.schema.validation"].value == "true"
    assert entries["confluent.key.schema.validation"].value == "false"
