"""Choose the Kafka source/sink: Spark's JVM connector when it is loadable, else the Python fallback.

Spark reserves the format name `kafka` for its connector, so the fallback has its own name; jobs ask this
module which name to pass to `format(...)` and never mention either directly.
"""

from __future__ import annotations

import logging

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from spark_jobs.kafka_source.datasource import KafkaDataSource
from spark_jobs.kafka_source.options import FALLBACK_NAME

log = logging.getLogger(__name__)

JVM_FORMAT = "kafka"
JVM_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def kafka_format(spark: SparkSession) -> str:
    """The format name to use, logging once which implementation it is."""
    if jvm_connector_loadable(spark):
        log.info("Kafka source/sink: Spark's connector (%s)", JVM_PROVIDER)
        return JVM_FORMAT
    spark.dataSource.register(KafkaDataSource)
    log.info("Kafka source/sink: Python Data Source '%s' (Spark's connector %s is not on the classpath; add it "
             "with --packages org.apache.spark:spark-sql-kafka-0-10_2.13:%s)", FALLBACK_NAME, JVM_PROVIDER,
             spark.version)
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
