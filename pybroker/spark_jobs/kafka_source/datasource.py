"""The fallback Kafka source and sink as a Spark Python Data Source, registered as `pybroker-kafka`.

It takes the options of Spark's `kafka` format and gives the same rows. Offsets are planned on the driver
(`OffsetLookup`), each Spark task reads one range on an executor (`read_range`), and streaming offsets are
Spark's JSON ({"topic": {"0": 23}}), so a checkpoint records exactly where each partition stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
                                    DataSourceWriter, InputPartition, WriterCommitMessage)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pybroker.spark_jobs.kafka_source.offsets import OffsetLookup
from pybroker.spark_jobs.kafka_source.options import (FALLBACK_NAME, KafkaPartition, SinkOptions, SourceOptions,
                                             offsets_from_json, offsets_to_json, sink_options, source_options)
from pybroker.spark_jobs.kafka_source.ranges import OffsetRange, rate_limit, split_ranges
from pybroker.spark_jobs.kafka_source.reader import read_range, report_data_loss
from pybroker.spark_jobs.kafka_source.schema import check_sink_schema, source_schema
from pybroker.spark_jobs.kafka_source.writer import write_rows


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FALLBACK_NAME

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return source_schema(include_headers=include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return KafkaBatchWriter(_checked_sink(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(_checked_sink(self.options, schema))


class KafkaBatchReader(DataSourceReader):
    """Plans every range when the query is planned; Spark runs one placeholder partition (value None) when
    there is nothing to read."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        lookup = OffsetLookup(self.options)
        partitions = lookup.partitions()
        start = lookup.resolve(self.options.starting, partitions, starting=True)
        end = lookup.resolve(self.options.ending, partitions, starting=False)
        for tp in partitions:
            if end[tp] < start[tp]:
                raise ValueError(f"The ending offset {end[tp]} of {tp.topic}-{tp.partition} is before its starting "
                                 f"offset {start[tp]}")
        return _planned(start, end, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return iter(()) if partition.value is None else read_range(partition.value, self.options)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch planning. Spark keeps one instance on the driver for the query's life; executors get
    fresh copies and only call `read`, so the admin client is opened on first use, by the planner."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._lookup: OffsetLookup | None = None
        self._available_now_target: dict[KafkaPartition, int] | None = None

    @property
    def lookup(self) -> OffsetLookup:
        if self._lookup is None:
            self._lookup = OffsetLookup(self.options)
        return self._lookup

    def initialOffset(self) -> dict:
        partitions = self.lookup.partitions()
        return offsets_to_json(self.lookup.resolve(self.options.starting, partitions, starting=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_target = self._latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        latest = self._latest() if self._available_now_target is None else self._available_now_target
        new = [tp for tp in latest if tp not in begin]
        begin.update(self.lookup.earliest(new))  # new partitions are read from their earliest offset
        end = {tp: max(offset, begin[tp]) for tp, offset in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict:
        return offsets_to_json(self._latest())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = offsets_from_json(start)
        finish = offsets_from_json(end)
        for tp in begin.keys() - finish.keys():
            report_data_loss(f"{tp.topic}-{tp.partition} is gone", fail=self.options.fail_on_data_loss)
        begin.update(self.lookup.earliest(tp for tp in finish if tp not in begin))
        return _planned(begin, finish, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(partition.value, self.options)

    def _latest(self) -> dict[KafkaPartition, int]:
        return self.lookup.latest(self.lookup.partitions())


@dataclass
class WrittenRows(WriterCommitMessage):
    count: int


class KafkaBatchWriter(DataSourceWriter):
    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return WrittenRows(write_rows(iterator, self.options))


class KafkaStreamWriter(DataSourceStreamWriter):
    """Each micro-batch's rows are acknowledged by Kafka before the task ends; nothing is left to commit."""

    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return WrittenRows(write_rows(iterator, self.options))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records are already in Kafka when the tasks end; Spark's Kafka sink has no commit step either."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already produced stay, as with Spark's sink: the retried batch may repeat them."""


def _checked_sink(raw: Mapping[str, str], schema: StructType) -> SinkOptions:
    options = sink_options(raw)
    check_sink_schema(schema, topic_option=options.topic)
    return options


def _planned(start: dict[KafkaPartition, int], end: dict[KafkaPartition, int],
             min_partitions: int | None) -> list[InputPartition]:
    ranges = [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(end)]
    return [InputPartition(r) for r in split_ranges(ranges, min_partitions)]
