"""Event generator: write a realistic, reproducible stream of shop events to a topic through the Kafka sink.

    python -m pybroker.spark_jobs.generate --bootstrap-servers 127.0.0.1:9092 --topic events --count 100000

Each event is JSON keyed by user: {"event_id", "user", "category", "action", "amount", "event_time"}.
Event times advance by 1/--events-per-second from --start with up to --jitter-ms of disorder, and every field
is a hash of the event number and --seed, so the same arguments always give the same stream. One Spark task
writes the events in order, as a single live source would.
"""

from __future__ import annotations

import argparse
import logging
from datetime import datetime, timezone

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pybroker.spark_jobs.common import build_session, job_parser, kafka_options, run_cli
from pybroker.spark_jobs.kafka_format import kafka_format

log = logging.getLogger(__name__)

CATEGORIES = ("books", "electronics", "garden", "games", "grocery", "toys")
ACTIONS = ("view", "view", "view", "view", "cart", "cart", "purchase")  # weighted: most events are views
USERS = 5000


def events(spark: SparkSession, *, count: int, start_ms: int, events_per_second: float, jitter_ms: int,
           seed: int) -> DataFrame:
    """The events as (key, value) rows, value being the event's JSON."""
    step_ms = 1000.0 / events_per_second

    def draw(salt: int, modulus: int) -> Column:
        """A reproducible pseudo-random number in [0, modulus) per event."""
        return F.pmod(F.xxhash64(F.col("id"), F.lit(salt), F.lit(seed)), F.lit(modulus))

    def pick(choices: tuple[str, ...], salt: int) -> Column:
        return F.element_at(F.array(*map(F.lit, choices)), (draw(salt, len(choices)) + 1).cast("int"))

    action = pick(ACTIONS, 3)
    event_ms = (F.lit(start_ms) + F.floor(F.col("id") * step_ms)
                + draw(4, 2 * jitter_ms + 1) - F.lit(jitter_ms))
    amount = F.when(action == "purchase", (draw(5, 20000) + 99) / 100).otherwise(0).cast("decimal(12,2)")
    user = F.concat(F.lit("user-"), F.lpad(draw(1, USERS).cast("string"), 4, "0"))
    return (spark.range(0, count, 1, numPartitions=1)
            .select(user.alias("user"),
                    F.format_string("evt-%09d", F.col("id")).alias("event_id"),
                    pick(CATEGORIES, 2).alias("category"), action.alias("action"), amount.alias("amount"),
                    F.date_format(F.timestamp_millis(event_ms), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("event_time"))
            .select(F.col("user").alias("key"),
                    F.to_json(F.struct("event_id", "user", "category", "action", "amount", "event_time"))
                    .alias("value")))


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--start", help="ISO-8601 event time of the first event (default: now)")
    parser.add_argument("--events-per-second", type=float, default=100.0, help="event-time rate")
    parser.add_argument("--jitter-ms", type=int, default=5000, help="largest event-time disorder")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    spark = build_session("pybroker-event-generator", args)
    written = generate(spark, args)
    log.info("wrote %d events to %s", written, args.topic)
    spark.stop()
    return 0


def generate(spark: SparkSession, args: argparse.Namespace) -> int:
    start = datetime.fromisoformat(args.start) if args.start else datetime.now(timezone.utc)
    frame = events(spark, count=args.count, start_ms=int(start.timestamp() * 1000),
                   events_per_second=args.events_per_second, jitter_ms=args.jitter_ms, seed=args.seed)
    writer = kafka_options(frame.write.format(kafka_format(spark)).mode("append").option("topic", args.topic), args)
    writer.save()
    return args.count


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
