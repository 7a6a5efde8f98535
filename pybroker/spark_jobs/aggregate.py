"""Streaming aggregation: event counts and amount sums per category in event-time tumbling windows.

    python -m pybroker.spark_jobs.aggregate --bootstrap-servers 127.0.0.1:9092 --input-topic events \\
        --output-topic event-stats --checkpoint /tmp/event-stats-checkpoint

Reads the generator's JSON events with an explicit schema, drops events later than the watermark, and
writes one JSON record per (window, category) to the output topic. In update mode (the default) each
micro-batch rewrites the windows it changed, so the last record per key is the window's current total (a
compacted output topic keeps exactly that); in append mode a window is written once, when the watermark
passes its end. The checkpoint holds the source offsets and the window state, so a restarted query continues
where it stopped.

Python Data Source stream writers accept append mode only, so update mode writes each micro-batch through
the batch Kafka sink in `foreachBatch`; with Spark's JVM connector both modes go through the same calls.
"""

from __future__ import annotations

import argparse
import logging

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DecimalType, StringType, StructField, StructType, TimestampType

from pybroker.spark_jobs.common import build_session, job_parser, kafka_options, run_cli, streaming_arguments
from pybroker.spark_jobs.kafka_format import kafka_format

log = logging.getLogger(__name__)

EVENT_SCHEMA = StructType([
    StructField("event_id", StringType()),
    StructField("user", StringType()),
    StructField("category", StringType()),
    StructField("action", StringType()),
    StructField("amount", DecimalType(12, 2)),
    StructField("event_time", TimestampType()),
])


def window_totals(kafka_rows: DataFrame, *, window: str, watermark: str) -> DataFrame:
    """Kafka rows in, Kafka rows out: key "<window start>/<category>", value the window's JSON totals."""
    events = (kafka_rows.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("e.*").where(F.col("event_time").isNotNull()))
    totals = (events.withWatermark("event_time", watermark)
              .groupBy(F.window("event_time", window).alias("w"), "category")
              .agg(F.count(F.lit(1)).alias("events"), F.sum("amount").alias("amount")))
    start = F.date_format("w.start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
    return totals.select(
        F.concat(start, F.lit("/"), F.col("category")).alias("key"),
        F.to_json(F.struct(start.alias("window_start"),
                           F.date_format("w.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                           "category", "events", "amount")).alias("value"))


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    kafka = kafka_format(spark)
    reader = kafka_options(spark.readStream.format(kafka), args).option("subscribe", args.input_topic) \
        .option("startingOffsets", args.starting_offsets)
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    rows = window_totals(reader.load(), window=args.window, watermark=args.watermark)
    writer = rows.writeStream.option("checkpointLocation", args.checkpoint).queryName("window-totals") \
        .outputMode(args.output_mode)
    if args.output_mode == "append":
        writer = kafka_options(writer.format(kafka), args).option("topic", args.output_topic)
    else:
        def write_batch(batch: DataFrame, _batch_id: int) -> None:
            kafka_options(batch.write.format(kafka).mode("append"), args).option("topic", args.output_topic).save()

        writer = writer.foreachBatch(write_batch)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def parser() -> argparse.ArgumentParser:
    result = job_parser(__doc__.splitlines()[0])
    result.add_argument("--input-topic", required=True)
    result.add_argument("--output-topic", required=True)
    result.add_argument("--window", default="1 minute", help="tumbling window length")
    result.add_argument("--watermark", default="10 minutes", help="how late an event may arrive")
    result.add_argument("--output-mode", choices=("update", "append"), default="update",
                        help="update: every change of a window; append: each window once, when it closes")
    streaming_arguments(result)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark = build_session("pybroker-window-totals", args)
    query = start(spark, args)
    log.info("query %s running; checkpoint %s", query.name, args.checkpoint)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
