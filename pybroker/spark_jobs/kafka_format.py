"""Choose the Kafka source/sink: Spark's JVM connector when it is loadable, else the Python fallback.

Spark reserves the format name `kafka` for its connector, so the fallback has its own name; jobs ask this
module which name to pass to `format(...)` and never mention either directly. SPARK_JOBS_KAFKA_CONNECTOR=jvm
or =python forces one (an error if it cannot run), so a deployment or a test knows which one it got.
"""

from __future__ import annotations

import logging
import os

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

CONNECTOR_ENV = "SPARK_JOBS_KAFKA_CONNECTOR"
CHOICES = ("auto", "jvm", "python")
JVM_FORMAT = "kafka"
JVM_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def kafka_format(spark: SparkSession) -> str:
    """The format name to use, logging which implementation Spark resolves it to."""
    choice = os.environ.get(CONNECTOR_ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{CONNECTOR_ENV} must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice != "python" and jvm_connector_loadable(spark):
        log.info("Kafka source/sink: Spark's connector (%s)", resolved_provider(spark, JVM_FORMAT))
        return JVM_FORMAT
    hint = f"add it with --packages org.apache.spark:spark-sql-kafka-0-10_2.13:{spark.version} (or --jars)"
    if choice == "jvm":
        raise RuntimeError(f"{CONNECTOR_ENV}=jvm, but Spark's connector {JVM_PROVIDER} is not on the classpath: {hint}")
    try:
        from pybroker.spark_jobs.kafka_source.datasource import KafkaDataSource
        from pybroker.spark_jobs.kafka_source.options import FALLBACK_NAME
    except ImportError as exc:  # the Python Data Source streaming API the fallback needs is newer than this Spark
        raise RuntimeError(f"the Python fallback needs pyspark>=4.3 ({exc}) and Spark's connector "
                           f"{JVM_PROVIDER} is not on the classpath: {hint}") from exc
    spark.dataSource.register(KafkaDataSource)
    log.info("Kafka source/sink: Python Data Source '%s' (Spark's connector %s is not on the classpath; %s)",
             FALLBACK_NAME, JVM_PROVIDER, hint)
    return FALLBACK_NAME


def jvm_connector_loadable(spark: SparkSession) -> bool:
    """True when the connector class resolves through the loader that also sees --packages and spark.jars."""
    jvm = getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        return False
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(JVM_PROVIDER, False, loader)
    except Py4JError:
        return False
    return True


def resolved_provider(spark: SparkSession, name: str) -> str:
    """The class Spark itself resolves a format name to (what `format(name)` will run)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the Spark session has no JVM gateway")
    conf = spark._jsparkSession.sessionState().conf()
    return jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(name, conf).getName()
