"""The fixed row layout of Spark's Kafka source and the columns its sink accepts."""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, BinaryType, DataType, IntegerType, LongType, StringType, StructField,
                               StructType, TimestampType)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

# Kafka's TimestampType ids as Spark exposes them in the `timestampType` column.
CREATE_TIME = 0
LOG_APPEND_TIME = 1


def source_schema(*, include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def check_sink_schema(schema: StructType, *, topic_option: str | None) -> None:
    """Refuse a DataFrame the sink cannot write, with the messages of Spark's KafkaWriter."""
    columns: dict[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}
    if "topic" not in columns and topic_option is None:
        raise ValueError("topic option required when no 'topic' attribute is present. Use the topic option for "
                         "setting a topic.")
    if "topic" in columns and topic_option is None and not isinstance(columns["topic"], StringType):
        raise ValueError(f"Topic type must be a string, found {columns['topic'].simpleString()}")
    if "value" not in columns:
        raise ValueError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in columns and not isinstance(columns[name], (StringType, BinaryType)):
            raise ValueError(f"{name} attribute type must be a string or binary, found "
                             f"{columns[name].simpleString()}")
    if "partition" in columns and not isinstance(columns["partition"], IntegerType):
        raise ValueError(f"partition attribute type must be an int, found {columns['partition'].simpleString()}")
    if "headers" in columns and columns["headers"] != HEADERS_TYPE:
        raise ValueError("headers attribute type must be an array of struct<key:string,value:binary>, found "
                         f"{columns['headers'].simpleString()}")
