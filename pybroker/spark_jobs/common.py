"""What every job shares: the command-line options for Spark and Kafka, and building the SparkSession."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import Callable, TypeVar

from confluent_kafka import KafkaException
from pyspark.errors import PySparkException
from pyspark.sql import DataFrameReader, DataFrameWriter, SparkSession
from pyspark.sql.streaming import DataStreamReader, DataStreamWriter

DEFAULT_MASTER = "local[2]"

Options = TypeVar("Options", DataFrameReader, DataStreamReader, DataFrameWriter, DataStreamWriter)

# The line naming the cause inside a Spark error that carries a Python worker's traceback.
CAUSE_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")


def job_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT",
                        help="Kafka bootstrap servers (kafka.bootstrap.servers)")
    parser.add_argument("--master", help=f"Spark master URL (default {DEFAULT_MASTER}, or spark-submit's --master)")
    parser.add_argument("--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Kafka client setting, passed as kafka.KEY (repeatable)")
    return parser


def streaming_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory; a restart resumes from it")
    parser.add_argument("--starting-offsets", default="earliest", help="startingOffsets for a new query")
    parser.add_argument("--max-offsets-per-trigger", type=int, help="maxOffsetsPerTrigger")
    parser.add_argument("--available-now", action="store_true",
                        help="process what the topic holds now, then stop (Trigger.AvailableNow)")


def kafka_options(options: Options, args: argparse.Namespace) -> Options:
    """Apply --bootstrap-servers and --kafka-option to a reader or writer."""
    options = options.option("kafka.bootstrap.servers", args.bootstrap_servers)
    for item in args.kafka_option:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--kafka-option expects KEY=VALUE, got {item!r}")
        options = options.option(f"kafka.{key}", value)
    return options


def build_session(app_name: str, args: argparse.Namespace) -> SparkSession:
    """A session on --master, or on spark-submit's master when launched by spark-submit (which sets the
    gateway variable); otherwise on a local Spark that runs Python workers with this interpreter."""
    _log_to_stderr()
    builder = SparkSession.builder.appName(app_name)
    if args.master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.master(args.master or DEFAULT_MASTER)
    return (builder.config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate())


def _log_to_stderr() -> None:
    """The jobs' own INFO lines go to stderr, without turning on INFO logging for every library (py4j)."""
    logger = logging.getLogger("pybroker.spark_jobs")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a job's main; a failure becomes one line on stderr and exit code 1 instead of a Spark stack trace."""
    try:
        return main(argv)
    except (PySparkException, KafkaException, ValueError, RuntimeError) as exc:
        print(f"{os.path.basename(sys.argv[0])}: error: {error_summary(exc)}", file=sys.stderr)
        return 1


def error_summary(exc: BaseException) -> str:
    """The innermost "SomethingError: message" line of a (possibly wrapped) error, else its first line."""
    lines = str(exc).splitlines()
    causes = [m for m in map(CAUSE_LINE.match, lines) if m]
    if causes:
        return f"{causes[-1].group(1)}: {causes[-1].group(2).strip()}"
    return lines[0] if lines else type(exc).__name__
