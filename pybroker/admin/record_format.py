"""How the console consumer prints a record: Kafka's DefaultMessageFormatter and its properties.

Fields come in Kafka's order, timestamp, partition, offset, headers, key, value, each followed by
`key.separator` when another field follows and by `line.separator` after the last one:
`CreateTime:1700000000000<TAB>Partition:0<TAB>Offset:5<TAB>h1:v1,h2:v2<TAB>key<TAB>value`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pybroker.client.fetcher import ConsumerRecord
from pybroker.records import TimestampType

TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class RecordFormat:
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RecordFormat:
        def flag(name: str, default: bool = False) -> bool:
            return properties.get(name, str(default)).strip().lower() == "true"

        def text(name: str, default: bytes) -> bytes:
            return properties[name].encode() if name in properties else default

        return cls(flag("print.timestamp"), flag("print.partition"), flag("print.offset"), flag("print.headers"),
                   flag("print.key"), flag("print.value", True), text("key.separator", b"\t"),
                   text("line.separator", b"\n"), text("headers.separator", b","), text("null.literal", b"null"))

    def format(self, record: ConsumerRecord) -> bytes:
        fields: list[bytes] = []
        if self.print_timestamp:
            fields.append(b"NO_TIMESTAMP" if record.timestamp == NO_TIMESTAMP else
                          f"{TIMESTAMP_TYPE_NAMES[record.timestamp_type]}:{record.timestamp}".encode())
        if self.print_partition:
            fields.append(f"Partition:{record.partition}".encode())
        if self.print_offset:
            fields.append(f"Offset:{record.offset}".encode())
        if self.print_headers:
            fields.append(self.headers_separator.join(
                k.encode() + b":" + self._nullable(v) for k, v in record.headers) if record.headers else b"NO_HEADERS")
        if self.print_key:
            fields.append(self._nullable(record.key))
        if self.print_value:
            fields.append(self._nullable(record.value))
        return self.key_separator.join(fields) + self.line_separator

    def _nullable(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else data
