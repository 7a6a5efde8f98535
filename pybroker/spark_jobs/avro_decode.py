"""Decode a topic's Avro values by the schemas in the schema registry, into columns, written as Parquet.

    python -m pybroker.spark_jobs.avro_decode --bootstrap-servers 127.0.0.1:9092 --topic readings \\
        --schema-registry-url http://127.0.0.1:8081 --path /tmp/readings-decoded

Values are in Confluent's wire format (magic byte 0, the 4-byte schema id, the Avro body), as
confluent-kafka's AvroSerializer writes them. The reader schema is the subject's latest version
(``<topic>-value``, or --subject/--version); each record is read with the schema it was written with,
fetched by id from the registry once per executor, and resolved to the reader schema by Avro's rules
(fastavro in a Python UDF: no spark-avro jar needed). A value that cannot be decoded gives null
columns and its reason in ``decode_error``.
"""

from __future__ import annotations

import argparse
import io
import json
import urllib.request
from typing import Any, Callable
from urllib.parse import quote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pybroker.spark_jobs.common import build_session, job_parser, kafka_options, run_cli
from pybroker.spark_jobs.kafka_format import kafka_format

_PRIMITIVES = {"boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(), "float": T.FloatType(),
               "double": T.DoubleType(), "bytes": T.BinaryType(), "string": T.StringType()}
_LOGICAL = {"timestamp-millis": T.TimestampType(), "timestamp-micros": T.TimestampType(), "date": T.DateType(),
            "uuid": T.StringType()}


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def reader_schema(registry_url: str, subject: str, version: str) -> dict[str, Any]:
    answer = fetch_json(f"{registry_url.rstrip('/')}/subjects/{quote(subject, safe='')}/versions/{version}")
    if answer.get("schemaType", "AVRO") != "AVRO":
        raise ValueError(f"subject {subject} holds {answer['schemaType']} schemas, not Avro")
    return json.loads(answer["schema"])


def spark_type(schema: Any, named: dict[str, T.DataType] | None = None) -> T.DataType:
    """The Spark type fastavro's decoded value of ``schema`` fits; a union with null is a nullable field."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in named:
            return named[schema]
        raise ValueError(f"Avro type {schema} is not supported here")
    if isinstance(schema, list):
        branches = [branch for branch in schema if branch != "null"]
        if len(branches) != 1:
            raise ValueError("Avro unions other than [null, T] are not supported here")
        return spark_type(branches[0], named)
    kind, logical = schema["type"], schema.get("logicalType")
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if logical == "decimal":
        return T.DecimalType(schema["precision"], schema.get("scale", 0))
    if kind == "record":
        struct = T.StructType([T.StructField(field["name"], spark_type(field["type"], named), True)
                               for field in schema["fields"]])
        named[schema["name"]] = struct
        return struct
    if kind == "enum":
        return T.StringType()
    if kind == "fixed":
        return T.BinaryType()
    if kind == "array":
        return T.ArrayType(spark_type(schema["items"], named), True)
    if kind == "map":
        return T.MapType(T.StringType(), spark_type(schema["values"], named), True)
    return spark_type(kind, named)


def decoder(registry_url: str, reader: dict[str, Any]) -> Callable[[bytes | None], tuple[Any, str | None]]:
    """The per-value function the UDF runs: writer schemas fetched by id and kept per process."""
    import fastavro

    parsed_reader = fastavro.parse_schema(reader)
    writers: dict[int, Any] = {}

    def decode(value: bytes | None) -> tuple[Any, str | None]:
        if value is None:
            return None, None
        if len(value) < 5 or value[0] != 0:
            return None, "not in the schema registry's wire format (magic byte 0 and a schema id)"
        schema_id = int.from_bytes(value[1:5], "big")
        try:
            if schema_id not in writers:
                answer = fetch_json(f"{registry_url.rstrip('/')}/schemas/ids/{schema_id}")
                writers[schema_id] = fastavro.parse_schema(json.loads(answer["schema"]))
            return fastavro.schemaless_reader(io.BytesIO(value[5:]), writers[schema_id], parsed_reader), None
        except Exception as exc:  # one bad record must not fail the job: it is reported in its row
            return None, f"schema id {schema_id}: {exc}"

    return decode


def decode(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The topic's records with their value decoded into the reader schema's columns."""
    subject = args.subject or f"{args.topic}-value"
    reader = reader_schema(args.schema_registry_url, subject, args.version)
    record_type = spark_type(reader)
    if not isinstance(record_type, T.StructType):
        record_type = T.StructType([T.StructField("value", record_type, True)])
    result_type = T.StructType([T.StructField("record", record_type, True),
                                T.StructField("decode_error", T.StringType(), True)])
    decode_value = decoder(args.schema_registry_url, reader)
    wraps = reader.get("type") != "record" if isinstance(reader, dict) else True

    def decode_row(value: bytes | None) -> tuple[Any, str | None]:
        decoded, error = decode_value(value)
        return ({"value": decoded} if wraps and decoded is not None else decoded), error

    rows = (kafka_options(spark.read.format(kafka_format(spark)), args)
            .option("subscribe", args.topic)
            .option("startingOffsets", args.starting_offsets)
            .option("endingOffsets", args.ending_offsets)
            .load())
    decoded = rows.withColumn("decoded", F.udf(decode_row, result_type)("value"))
    return decoded.select("partition", "offset", "timestamp", "decoded.record.*", "decoded.decode_error")


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    frame = decode(spark, args)
    if args.path:
        frame.write.mode("overwrite").parquet(args.path)
    else:
        frame.show(truncate=False)


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--schema-registry-url", required=True, metavar="URL")
    parser.add_argument("--subject", help="subject of the reader schema (default <topic>-value)")
    parser.add_argument("--version", default="latest", help="version of the reader schema (default latest)")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--ending-offsets", default="latest")
    parser.add_argument("--path", help="write Parquet here (default: print the rows)")
    args = parser.parse_args(argv)
    spark = build_session("pybroker-avro-decode", args)
    run(spark, args)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
