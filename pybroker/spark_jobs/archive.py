"""Streaming archiver: copy a topic into Parquet files partitioned by date, exactly once.

    python -m pybroker.spark_jobs.archive --bootstrap-servers 127.0.0.1:9092 --topic events \\
        --path /tmp/events-archive --checkpoint /tmp/events-archive-checkpoint

Spark's file sink records each micro-batch's files in `<path>/_spark_metadata` and the source offsets in the
checkpoint, so after a crash or restart every message appears exactly once among the files Spark lists
(read the archive with Spark, which honours that log, not with a bare Parquet reader).
"""

from __future__ import annotations

import argparse
import logging

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from pybroker.spark_jobs.common import build_session, job_parser, kafka_options, run_cli, streaming_arguments
from pybroker.spark_jobs.kafka_format import kafka_format

log = logging.getLogger(__name__)


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    reader = kafka_options(spark.readStream.format(kafka_format(spark)), args) \
        .option("subscribe", args.topic).option("startingOffsets", args.starting_offsets) \
        .option("includeHeaders", "true")
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    rows = reader.load().withColumn("date", F.to_date("timestamp"))
    writer = rows.writeStream.format("parquet").partitionBy("date").option("path", args.path) \
        .option("checkpointLocation", args.checkpoint).queryName("archive")
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--path", required=True, help="output directory of the Parquet files")
    streaming_arguments(parser)
    args = parser.parse_args(argv)
    spark = build_session("pybroker-archive", args)
    query = start(spark, args)
    log.info("archiving %s to %s; checkpoint %s", args.topic, args.path, args.checkpoint)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
