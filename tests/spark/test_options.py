"""The fallback source takes Spark's Kafka options and refuses bad ones with Spark's messages."""

from __future__ import annotations

import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from pybroker.spark_jobs.common import error_summary
from pybroker.spark_jobs.kafka_source.options import (EARLIEST, LATEST, KafkaPartition, Subscription, sink_options,
                                             source_options)
from pybroker.spark_jobs.kafka_source.schema import check_sink_schema

SERVERS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_options_are_case_insensitive_and_kafka_prefixed_ones_reach_the_client() -> None:
    options = source_options({**SERVERS, "Subscribe": "a, b", "kafka.isolation.level": "read_committed",
                              "maxOffsetsPerTrigger": "500", "includeHeaders": "true", "failOnDataLoss": "false",
                              "minPartitions": "4"}, streaming=True)
    assert options.subscription == Subscription(topics=("a", "b"))
    assert options.client_config == {"bootstrap.servers": "127.0.0.1:9092", "isolation.level": "read_committed"}
    assert (options.max_offsets_per_trigger, options.min_partitions) == (500, 4)
    assert options.include_headers and not options.fail_on_data_loss
    assert options.starting.kind == "latest"  # the streaming default


def test_batch_defaults_and_per_partition_json() -> None:
    options = source_options({**SERVERS, "assign": '{"t": [0, 1]}',
                              "endingOffsets": '{"t": {"0": 50, "1": -1}}'}, streaming=False)
    assert options.subscription.assigned == (KafkaPartition("t", 0), KafkaPartition("t", 1))
    assert options.starting.kind == "earliest"
    assert options.ending.offsets == {KafkaPartition("t", 0): 50, KafkaPartition("t", 1): LATEST}


def test_starting_timestamp_takes_precedence_over_starting_offsets() -> None:
    options = source_options({**SERVERS, "subscribe": "t", "startingOffsets": "earliest",
                              "startingTimestamp": "1700000000000"}, streaming=True)
    assert (options.starting.kind, options.starting.timestamp) == ("timestamp", 1_700_000_000_000)


def test_subscribe_pattern_matches_whole_topic_names() -> None:
    subscription = source_options({**SERVERS, "subscribePattern": "orders-.*"}, streaming=True).subscription
    assert subscription.select({"orders-eu": 2, "orders": 1, "x-orders-us": 1}) == [
        KafkaPartition("orders-eu", 0), KafkaPartition("orders-eu", 1)]


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"subscribe": "t"}, True, "Option 'kafka.bootstrap.servers' must be specified"),
    (SERVERS, True, "One of the following options must be specified for Kafka source"),
    ({**SERVERS, "subscribe": "t", "assign": '{"t":[0]}'}, True, "Only one of the following options"),
    ({**SERVERS, "subscribe": " , "}, True, "No topics to subscribe to"),
    ({**SERVERS, "subscribe": "t", "kafka.auto.offset.reset": "earliest"}, True,
     "Kafka option 'auto.offset.reset' is not supported"),
    ({**SERVERS, "subscribe": "t", "kafka.enable.auto.commit": "true"}, True,
     "Kafka option 'enable.auto.commit' is not supported"),
    ({**SERVERS, "subscribe": "t", "startingOffsets": "latest"}, False,
     "starting offset can't be latest for batch queries on Kafka"),
    ({**SERVERS, "subscribe": "t", "endingOffsets": "earliest"}, False,
     "ending offset can't be earliest for batch queries on Kafka"),
    ({**SERVERS, "subscribe": "t", "endingOffsets": f'{{"t": {{"0": {EARLIEST}}}}}'}, False,
     "endingOffsets for t-0 can't be earliest"),
    ({**SERVERS, "subscribe": "t", "endingOffsets": "latest"}, True, "Ending offset not valid in streaming queries"),
    ({**SERVERS, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "must be a positive integer"),
    ({**SERVERS, "subscribe": "t", "startingOffsets": "{not json"}, True, "is not valid JSON"),
    ({**SERVERS, "subscribe": "t", "failOnDataLoss": "maybe"}, True, "must be true or false"),
    ({**SERVERS, "subscribe": "t", "minOffsetsPerTrigger": "10"}, True, "'minoffsetspertrigger' is not supported yet"),
])
def test_bad_options_are_refused(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        source_options(options, streaming=streaming)


def test_sink_needs_a_topic_and_a_value_of_the_right_types() -> None:
    options = sink_options({**SERVERS, "topic": "out"})
    check_sink_schema(StructType([StructField("value", StringType())]), topic_option=options.topic)
    with pytest.raises(ValueError, match="topic option required when no 'topic' attribute is present"):
        check_sink_schema(StructType([StructField("value", StringType())]), topic_option=None)
    with pytest.raises(ValueError, match="Required attribute 'value' not found"):
        check_sink_schema(StructType([StructField("key", StringType())]), topic_option="out")
    with pytest.raises(ValueError, match="value attribute type must be a string or binary"):
        check_sink_schema(StructType([StructField("value", IntegerType())]), topic_option="out")
    with pytest.raises(ValueError, match="Kafka option 'value.serializer' is not supported"):
        sink_options({**SERVERS, "kafka.value.serializer": "x"})


def test_a_job_error_is_reduced_to_its_cause_line() -> None:
    wrapped = ValueError("[PYTHON_EXCEPTION] An exception was thrown from the Python worker:\nTraceback (most recent "
                         "call last):\n  File \"x.py\", line 1, in f\npybroker.spark_jobs.kafka_source.reader.DataLossError: "
                         "Cannot fetch offset 5 of t-0\n SQLSTATE: 38000")
    assert error_summary(wrapped) == "DataLossError: Cannot fetch offset 5 of t-0"
    assert error_summary(ValueError("plain message")) == "plain message"
