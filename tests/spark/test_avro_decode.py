"""pybroker.spark_jobs.avro_decode on real local Spark: values written by confluent-kafka's AvroSerializer with
two versions of a schema come back as columns of the latest version (the older records resolved to it
by Avro's rules), a value without the wire format gets its reason in decode_error."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from pybroker.spark_jobs.avro_decode import decode, run
from pybroker.testing import EmbeddedBroker
from tests.spark.support import job_args

V1 = {"type": "record", "name": "Reading", "namespace": "iot",
      "fields": [{"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "unit", "type": "string", "default": "C"},
                                     {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("avro-decode"), schema_registry=True) as broker:
        broker.create_topic("readings")
        client = SchemaRegistryClient({"url": broker.schema_registry_url})
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
        context = SerializationContext("readings", MessageField.VALUE)
        old, new = AvroSerializer(client, json.dumps(V1)), AvroSerializer(client, json.dumps(V2))
        producer.produce("readings", old({"sensor": "a", "celsius": 20.5}, context))
        producer.produce("readings", new({"sensor": "b", "celsius": 21.0, "unit": "K", "tags": ["roof"]}, context))
        producer.produce("readings", b"not avro")
        assert producer.flush(30) == 0
        yield broker


def args(broker: EmbeddedBroker, **extra: object) -> argparse.Namespace:
    values = {"bootstrap_servers": broker.bootstrap_servers, "topic": "readings", "ending_offsets": "latest",
              "schema_registry_url": broker.schema_registry_url, "subject": None, "version": "latest",
              "path": None, **extra}
    return job_args(**values)


def test_values_decode_into_the_latest_schema(spark: SparkSession, registry_broker: EmbeddedBroker) -> None:
    rows = decode(spark, args(registry_broker)).orderBy("offset").collect()
    assert [(r.sensor, r.celsius, r.unit, r.tags, r.decode_error) for r in rows[:2]] == [
        ("a", 20.5, "C", [], None), ("b", 21.0, "K", ["roof"], None)]
    assert rows[2].sensor is None and "wire format" in rows[2].decode_error


def test_the_job_writes_parquet(spark: SparkSession, registry_broker: EmbeddedBroker, tmp_path: Path) -> None:
    output = tmp_path / "decoded"
    run(spark, args(registry_broker, path=str(output), version="1"))
    rows = spark.read.parquet(str(output)).orderBy("offset").collect()
    assert [(r.sensor, r.celsius) for r in rows[:2]] == [("a", 20.5), ("b", 21.0)]
    assert "unit" not in rows[0].asDict()  # version 1 as the reader schema
