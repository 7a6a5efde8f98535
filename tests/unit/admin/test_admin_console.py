"""Console producer line parsing, console consumer record printing, configs and reset-offsets parsing,
without a broker."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from pybroker.admin.configs import config_line, parse_add_config
from pybroker.admin.group_tool import assignment_text, table
from pybroker.client.group_offsets import OffsetRow
from pybroker.admin.console_producer import LineFormat
from pybroker.client.offset_reset import parse_datetime, parse_duration_ms, parse_topic_partitions
from pybroker.admin.record_format import RecordFormat
from pybroker.client.command_line import CommandError, UsageError
from pybroker.client import ConfigEntry, ConfigSynonym
from pybroker.client.fetcher import ConsumerRecord
from pybroker.common.topic import TopicPartition
from pybroker.records import RecordInput, TimestampType

RECORD = ConsumerRecord("t", 2, 17, 1700000000000, TimestampType.CREATE_TIME, b"k", b"v", (("h1", b"x"), ("h2", None)))


def test_line_format_splits_headers_key_and_value() -> None:
    plain = LineFormat.from_properties({})
    assert plain.parse(b"a:b", 1) == RecordInput(None, b"a:b", [])
    keyed = LineFormat.from_properties({"parse.key": "true", "key.separator": ":"})
    assert keyed.parse(b"k:v:w", 1) == RecordInput(b"k", b"v:w", [])
    full = LineFormat.from_properties({"parse.key": "true", "parse.headers": "true", "null.marker": "NULL"})
    assert full.parse(b"h1:a,h2\tNULL\tv", 1) == RecordInput(None, b"v", [("h1", b"a"), ("h2", None)])


def test_line_without_separator_fails_unless_ignored() -> None:
    keyed = LineFormat.from_properties({"parse.key": "true"})
    with pytest.raises(CommandError, match="No key separator found on line number 3: 'novalue'"):
        keyed.parse(b"novalue", 3)
    lenient = LineFormat.from_properties({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse(b"novalue", 3) == RecordInput(None, b"novalue", [])


def test_record_format_prints_fields_in_kafka_order() -> None:
    assert RecordFormat.from_properties({}).format(RECORD) == b"v\n"
    everything = RecordFormat.from_properties({f"print.{f}": "true" for f in
                                               ("timestamp", "partition", "offset", "headers", "key")})
    assert everything.format(RECORD) == b"CreateTime:1700000000000\tPartition:2\tOffset:17\th1:x,h2:null\tk\tv\n"
    custom = RecordFormat.from_properties({"print.key": "true", "key.separator": "=", "print.value": "false",
                                           "print.headers": "true"})
    no_key = ConsumerRecord("t", 0, 0, -1, TimestampType.CREATE_TIME, None, b"v")
    assert custom.format(no_key) == b"NO_HEADERS=null\n"


def test_add_config_takes_bracketed_lists() -> None:
    assert parse_add_config("retention.ms=1000,cleanup.policy=[compact,delete],x=") == \
        {"retention.ms": "1000", "cleanup.policy": "compact,delete", "x": ""}
    with pytest.raises(UsageError):
        parse_add_config("novalue")


def test_config_line() -> None:
    entry = ConfigEntry("retention.ms", "1000", 1, False, synonyms=(
        ConfigSynonym("retention.ms", "1000", 1), ConfigSynonym("log.retention.ms", None, 5)))
    assert config_line(entry) == ("  retention.ms=1000 sensitive=false synonyms={"
                                  "DYNAMIC_TOPIC_CONFIG:retention.ms=1000, DEFAULT_CONFIG:log.retention.ms=null}")


def test_reset_arguments() -> None:
    assert parse_topic_partitions(["a", "b:2,0"]) == {"a": None, "b": [0, 2]}
    assert parse_datetime("2024-01-02T03:04:05.678Z") == \
        int(datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc).timestamp() * 1000)
    assert parse_datetime("2024-01-02T03:04:05.678+01:00") == parse_datetime("2024-01-02T02:04:05.678Z")
    assert parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4500
    assert parse_duration_ms("PT30M") == 1_800_000
    for bad in ("P", "1H", "PT"):
        with pytest.raises(UsageError):
            parse_duration_ms(bad)
    with pytest.raises(UsageError):
        parse_datetime("yesterday")


def test_group_tables() -> None:
    assert OffsetRow("g", "t", 0, 3, 10).lag == 7
    assert OffsetRow("g", "t", 0, None, 10).lag is None
    assert table(("A", "B"), [["x", "yy"]], [3, None]) == ["A   B", "x   yy"]
    assert assignment_text([TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("a", 0)]) == "a(0,2),b(1)"
    assert assignment_text([]) == "-"
