"""Batch report: per-partition message count, bytes, first/last offsets and timestamps of a topic range.

    python -m pybroker.spark_jobs.report --bootstrap-servers 127.0.0.1:9092 --topic events \\
        [--starting-offsets earliest] [--ending-offsets latest] [--json]

Bytes count keys plus values. Partitions with no message in the range are not listed.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pybroker.spark_jobs.common import build_session, job_parser, kafka_options, run_cli
from pybroker.spark_jobs.kafka_format import kafka_format

COLUMNS = ("TOPIC", "PARTITION", "MESSAGES", "BYTES", "FIRST-OFFSET", "LAST-OFFSET", "FIRST-TIMESTAMP",
           "LAST-TIMESTAMP")


@dataclass(frozen=True)
class PartitionReport:
    topic: str
    partition: int
    messages: int
    bytes: int
    first_offset: int
    last_offset: int
    first_timestamp: datetime
    last_timestamp: datetime


def report(spark: SparkSession, args: argparse.Namespace) -> list[PartitionReport]:
    reader = (kafka_options(spark.read.format(kafka_format(spark)), args)
              .option("subscribe", args.topic)
              .option("startingOffsets", args.starting_offsets)
              .option("endingOffsets", args.ending_offsets))
    if args.min_partitions:
        reader = reader.option("minPartitions", args.min_partitions)
    rows = reader.load()
    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    totals = (rows.groupBy("topic", "partition")
              .agg(F.count(F.lit(1)).alias("messages"), F.sum(size).alias("bytes"),
                   F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"),
                   F.min("timestamp").alias("first_timestamp"), F.max("timestamp").alias("last_timestamp"))
              .orderBy("topic", "partition"))
    return [PartitionReport(**row.asDict()) for row in totals.collect()]


def render_table(reports: list[PartitionReport]) -> str:
    cells = [COLUMNS] + [(r.topic, str(r.partition), str(r.messages), str(r.bytes), str(r.first_offset),
                          str(r.last_offset), r.first_timestamp.isoformat(), r.last_timestamp.isoformat())
                         for r in reports]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells)


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic(s) to report on, comma-separated (subscribe)")
    parser.add_argument("--starting-offsets", default="earliest", help="startingOffsets")
    parser.add_argument("--ending-offsets", default="latest", help="endingOffsets")
    parser.add_argument("--min-partitions", type=int, help="minPartitions: split large partitions into more tasks")
    parser.add_argument("--json", action="store_true", help="one JSON object per partition instead of a table")
    args = parser.parse_args(argv)
    spark = build_session("pybroker-topic-report", args)
    reports = report(spark, args)
    if args.json:
        for item in reports:
            print(json.dumps(asdict(item), default=str))
    else:
        print(render_table(reports))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
