"""confluent-kafka-python's own SchemaRegistryClient (sync and async) and its Avro, JSON Schema and
Protobuf serializers against the broker's registry, records round-tripping through pybroker topics."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import (AsyncSchemaRegistryClient, Schema, SchemaReference,
                                             SchemaRegistryClient, ServerConfig)
from confluent_kafka.schema_registry.common.schema_registry_client import ConfigCompatibilityLevel
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from pybroker.testing import EmbeddedBroker

USER = {"type": "record", "name": "User", "namespace": "example",
        "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("registry"), schema_registry=True) as embedded:
        yield embedded


@pytest.fixture
def client(broker: EmbeddedBroker) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": broker.schema_registry_url})


def round_trip(broker: EmbeddedBroker, topic: str, serialize: Any, deserialize: Any, values: list[Any]) -> list[Any]:
    broker.create_topic(topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    for value in values:
        producer.produce(topic, serialize(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received: list[Any] = []
    try:
        while len(received) < len(values):
            message = consumer.poll(10)
            assert message is not None, f"only {len(received)} of {len(values)} records came back"
            assert message.error() is None
            assert message.value()[0] == 0  # Confluent's wire format: magic byte, then the schema id
            received.append(deserialize(message.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    return received


def test_avro_round_trip_with_the_clients_serializers(broker: EmbeddedBroker, client: SchemaRegistryClient) -> None:
    import json

    serializer = AvroSerializer(client, json.dumps(USER))
    deserializer = AvroDeserializer(client)
    values = [{"name": "ada", "age": 36}, {"name": "alan", "age": 41}]
    assert round_trip(broker, "avro-users", serializer, deserializer, values) == values
    registered = client.get_latest_version("avro-users-value")
    assert registered.version == 1 and json.loads(registered.schema.schema_str) == USER
    assert client.get_schema(registered.schema_id).schema_type == "AVRO"


def test_json_schema_round_trip(broker: EmbeddedBroker, client: SchemaRegistryClient) -> None:
    import json

    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
              "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}, "required": ["id"]}
    serializer = JSONSerializer(json.dumps(schema), client)
    deserializer = JSONDeserializer(json.dumps(schema), schema_registry_client=client)
    values = [{"id": 1, "item": "book"}, {"id": 2}]
    assert round_trip(broker, "json-orders", serializer, deserializer, values) == values
    assert client.get_latest_version("json-orders-value").schema.schema_type == "JSON"


def _person_classes() -> tuple[Any, Any]:
    """Two message classes built at run time: Address in address.proto, Person in person.proto importing it
    and google/protobuf/timestamp.proto (a reference the serializer registers, and a bundled import)."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    address = descriptor_pb2.FileDescriptorProto(name="shop/address.proto", package="shop", syntax="proto3")
    message = address.message_type.add(name="Address")
    message.field.add(name="city", number=1, type=9, label=1)
    person = descriptor_pb2.FileDescriptorProto(name="shop/person.proto", package="shop", syntax="proto3",
                                                dependency=["shop/address.proto", "google/protobuf/timestamp.proto"])
    message = person.message_type.add(name="Person")
    message.field.add(name="name", number=1, type=9, label=1)
    message.field.add(name="home", number=2, type=11, label=1, type_name=".shop.Address")
    message.field.add(name="born", number=3, type=11, label=1, type_name=".google.protobuf.Timestamp")
    pool.Add(address)
    pool.Add(person)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Person")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Address")))


def test_protobuf_round_trip_with_a_reference(broker: EmbeddedBroker, client: SchemaRegistryClient) -> None:
    person_class, address_class = _person_classes()
    serializer = ProtobufSerializer(person_class, client, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(person_class, {"use.deprecated.format": False})
    value = person_class(name="grace", home=address_class(city="arlington"))
    value.born.seconds = 1000
    (back,) = round_trip(broker, "proto-people", serializer, deserializer, [value])
    assert back == value
    latest = client.get_latest_version("proto-people-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert "message Person" in latest.schema.schema_str
    assert [(r.name, r.subject) for r in latest.schema.references] == [("shop/address.proto", "shop/address.proto")]
    referenced = client.get_latest_version("shop/address.proto")
    assert client.get_referenced_by("shop/address.proto", referenced.version) == [latest.schema_id]


def test_avro_references_across_subjects(client: SchemaRegistryClient) -> None:
    import json

    address = {"type": "record", "name": "Address", "namespace": "example", "fields": [{"name": "city", "type": "string"}]}
    address_id = client.register_schema("ref-address", Schema(json.dumps(address), "AVRO"))
    customer = {"type": "record", "name": "Customer", "namespace": "example",
                "fields": [{"name": "home", "type": "example.Address"}]}
    reference = SchemaReference("example.Address", "ref-address", 1)
    customer_id = client.register_schema("ref-customer", Schema(json.dumps(customer), "AVRO", [reference]))
    assert customer_id != address_id
    fetched = client.get_schema(customer_id)
    assert [(r.name, r.subject, r.version) for r in fetched.references] == [("example.Address", "ref-address", 1)]
    with pytest.raises(SchemaRegistryError) as refused:  # still referenced
        client.delete_subject("ref-address")
    assert refused.value.error_code == 42206


def test_json_schema_references_across_subjects(client: SchemaRegistryClient) -> None:
    import json

    address = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    client.register_schema("json-address", Schema(json.dumps(address), "JSON"))
    person = {"type": "object", "properties": {"home": {"$ref": "address.json"}}}
    reference = SchemaReference("address.json", "json-address", 1)
    person_id = client.register_schema("json-person-value", Schema(json.dumps(person), "JSON", [reference]))
    serializer = JSONSerializer(client.get_schema(person_id), client, conf={"auto.register.schemas": False,
                                                                            "use.latest.version": True})
    context = SerializationContext("json-person", MessageField.VALUE)
    from confluent_kafka.serialization import SerializationError

    assert serializer({"home": {"city": "oslo"}}, SerializationContext("json-person", MessageField.VALUE))
    with pytest.raises(SerializationError):  # the referenced schema's rule applies
        serializer({"home": {"town": "oslo"}}, context)
    assert client.get_referenced_by("json-address", 1) == [person_id]


def test_compatibility_config_and_incompatible_registration(client: SchemaRegistryClient) -> None:
    import json

    subject = "compat-value"
    client.register_schema(subject, Schema(json.dumps(USER), "AVRO"))
    client.set_config(subject, ServerConfig(compatibility=ConfigCompatibilityLevel.FULL))
    assert client.get_config(subject).compatibility_level == "FULL"
    without_default = {**USER, "fields": USER["fields"] + [{"name": "email", "type": "string"}]}
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(without_default), "AVRO"))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert not client.test_compatibility(subject, Schema(json.dumps(without_default), "AVRO"))
    with_default = {**USER, "fields": USER["fields"] + [{"name": "email", "type": "string", "default": ""}]}
    assert client.test_compatibility(subject, Schema(json.dumps(with_default), "AVRO"))
    assert client.register_schema(subject, Schema(json.dumps(with_default), "AVRO")) > 0
    assert client.get_versions(subject) == [1, 2]


def test_errors_the_client_branches_on(client: SchemaRegistryClient) -> None:
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_latest_version("no-such-subject")
    assert missing.value.error_code == 40401
    with pytest.raises(SchemaRegistryError) as missing_id:
        client.get_schema(999999)
    assert missing_id.value.error_code == 40403
    with pytest.raises(SchemaRegistryError) as invalid:
        client.register_schema("bad-avro", Schema('{"type": "record", "name": "X"}', "AVRO"))
    assert invalid.value.error_code == 42201


def test_concurrent_registration_of_one_schema_gets_one_id(broker: EmbeddedBroker) -> None:
    import json

    schema = Schema(json.dumps({"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}), "AVRO")

    def register(index: int) -> int:
        return SchemaRegistryClient({"url": broker.schema_registry_url}).register_schema(f"colour-{index % 3}", schema)

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        ids = list(pool.map(register, range(24)))
    assert len(set(ids)) == 1
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    assert all(client.get_versions(f"colour-{i}") == [1] for i in range(3))


def test_async_client_and_serializers(broker: EmbeddedBroker) -> None:
    import json

    from confluent_kafka.schema_registry._async.avro import AsyncAvroDeserializer, AsyncAvroSerializer

    async def scenario() -> None:
        client = AsyncSchemaRegistryClient({"url": broker.schema_registry_url})
        serializer = await AsyncAvroSerializer(client, json.dumps(USER))
        deserializer = await AsyncAvroDeserializer(client)
        context = SerializationContext("async-users", MessageField.VALUE)
        encoded = await serializer({"name": "kay", "age": 7}, context)
        (received,) = await asyncio.to_thread(round_trip, broker, "async-users", lambda value, _: value,
                                              lambda value, _: value, [encoded])
        assert await deserializer(received, context) == {"name": "kay", "age": 7}
        schema_id = await client.register_schema("async-value", Schema(json.dumps(USER), "AVRO"))
        assert (await client.get_schema(schema_id)).schema_type == "AVRO"
        assert "async-value" in await client.get_subjects()
        registered = await client.lookup_schema("async-value", Schema(json.dumps(USER), "AVRO"))
        assert registered.schema_id == schema_id and registered.version == 1
        assert await client.delete_subject("async-value") == [1]
        assert await client.delete_subject("async-value", permanent=True) == [1]
        assert "async-value" not in await client.get_subjects()

    asyncio.run(scenario())


def test_state_is_rebuilt_from_the_topic_after_a_restart(tmp_path: Path) -> None:
    import json

    with EmbeddedBroker(data_dir=tmp_path, schema_registry=True) as broker:
        client = SchemaRegistryClient({"url": broker.schema_registry_url})
        first = client.register_schema("restart-a", Schema(json.dumps(USER), "AVRO"))
        other = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "long"}]}
        second = client.register_schema("restart-b", Schema(json.dumps(other), "AVRO"))
        client.set_config("restart-a", ServerConfig(compatibility=ConfigCompatibilityLevel.NONE))
        client.delete_subject("restart-b")
        client.delete_subject("restart-b", permanent=True)  # the highest id is gone for good
        url = broker.schema_registry_url
        broker.restart()
        assert broker.schema_registry_url == url
        client = SchemaRegistryClient({"url": url})
        assert client.get_subjects() == ["restart-a"]
        assert client.get_latest_version("restart-a").schema_id == first
        assert client.get_config("restart-a").compatibility_level == "NONE"
        third = {"type": "record", "name": "Third", "fields": [{"name": "y", "type": "long"}]}
        assert client.register_schema("restart-c", Schema(json.dumps(third), "AVRO")) == second + 1  # never reused
