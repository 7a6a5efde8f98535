"""What a Spark test asks of a Spark session, as plain calls with picklable arguments and results.

The same functions run in the test process (pyspark of the main venv: the Python fallback) and in a Spark 4.0
process with Spark's JVM connector on its classpath (`tests/spark/remote.py`), so a test parametrized over both
makes exactly the same calls. This module imports nothing from pytest: the Spark 4.0 process imports it too.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import asdict
from typing import Any, Callable

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from pybroker.spark_jobs import aggregate, archive, generate, report
from pybroker.spark_jobs.kafka_format import kafka_format, resolved_provider

STREAMING_JOBS = {"aggregate": aggregate.start, "archive": archive.start}
SINK_SCHEMA = StructType([
    StructField("topic", StringType()), StructField("key", StringType()), StructField("value", StringType()),
    StructField("partition", IntegerType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
])


def connector(spark: SparkSession) -> tuple[str, str, str]:
    """(format name the jobs use, class Spark resolves it to, Spark version)."""
    name = kafka_format(spark)
    return name, resolved_provider(spark, name), spark.version


def run_generate(spark: SparkSession, args: dict[str, Any]) -> int:
    return generate.generate(spark, argparse.Namespace(**args))


def run_report(spark: SparkSession, args: dict[str, Any]) -> list[dict[str, Any]]:
    return [asdict(r) for r in report.report(spark, argparse.Namespace(**args))]


def run_stream(spark: SparkSession, job: str, args: dict[str, Any], batches: int | None = None) -> dict[str, Any]:
    """Run a streaming job until it ends (Trigger.AvailableNow) or, with `batches`, until that many
    micro-batches with input completed, then stop it. Returns its progress and error, if any."""
    query = STREAMING_JOBS[job](spark, argparse.Namespace(**args))
    return _finish(query, batches)


def read(spark: SparkSession, options: dict[str, str], *, columns: list[str], checkpoint: str | None = None,
         batches: int | None = None) -> dict[str, Any]:
    """Rows (as dicts of `columns`) of a batch read, or of a streaming read when a checkpoint is given."""
    if checkpoint is None:
        frame = spark.read.format(kafka_format(spark)).options(**options).load()
        return {"rows": _rows(frame.select(*columns))}
    seen: list[dict[str, Any]] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        seen.extend(_rows(batch.select(*columns)))

    query = (spark.readStream.format(kafka_format(spark)).options(**options).load().writeStream
             .foreachBatch(collect).option("checkpointLocation", checkpoint))
    query = query.start() if batches else query.trigger(availableNow=True).start()
    return {**_finish(query, batches), "rows": seen}


def write(spark: SparkSession, rows: list[dict[str, Any]], options: dict[str, str]) -> None:
    """A batch write of rows with SINK_SCHEMA's columns (those absent from every row are left out)."""
    present = [f for f in SINK_SCHEMA.fields if any(f.name in row for row in rows)]
    frame = spark.createDataFrame([tuple(row.get(f.name) for f in present) for row in rows], StructType(present))
    frame.write.format(kafka_format(spark)).options(**options).mode("append").save()


OPERATIONS: dict[str, Callable[..., Any]] = {"connector": connector, "generate": run_generate, "report": run_report,
                                             "stream": run_stream, "read": read, "write": write}


def _finish(query: StreamingQuery, batches: int | None) -> dict[str, Any]:
    if batches:
        while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < batches and query.isActive:
            query.awaitTermination(0.2)
        query.stop()
    else:
        with contextlib.suppress(StreamingQueryException):  # reported below, as a result
            query.awaitTermination()
    error = query.exception()
    return {"input_rows": [p["numInputRows"] for p in query.recentProgress],
            "busy_s": sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress) / 1000,
            "sources": sorted({s["description"] for p in query.recentProgress for s in p["sources"]}),
            "error": None if error is None else str(error)}


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in frame.collect()]
