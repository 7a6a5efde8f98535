"""The message browser: where to start reading each partition, the reading itself, and how bytes are shown.

Bytes are shown as UTF-8 text, pretty-printed when they are a JSON object or array, and as hex
otherwise; the templates escape all of it (Jinja2 autoescape), so a value holding HTML is shown as text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from pybroker.client.offset_reset import parse_datetime
from pybroker.client.command_line import UsageError
from pybroker.client import AdminClient, ConsumerRecord, Fetcher, FetchSettings, KafkaClient, OffsetSpec
from pybroker.client.fetcher import READ_COMMITTED, READ_UNCOMMITTED
from pybroker.common.topic import TopicPartition

MODES = ("newest", "oldest", "offset", "timestamp")
MAX_LIMIT = 1000
MAX_FETCH_ROUNDS = 50
PREVIEW_CHARS = 1000  # longer values are cut in the list, with a link to the whole record


class BrowseError(ValueError):
    """A search the browser cannot run (bad offset or time), shown on the page."""


@dataclass(frozen=True, slots=True)
class Shown:
    """Bytes as the page shows them."""

    kind: str  # "null", "text", "json" or "hex"
    text: str

    @property
    def truncated(self) -> bool:
        return len(self.text) > PREVIEW_CHARS

    @property
    def preview(self) -> str:
        return self.text[:PREVIEW_CHARS] + "…" if self.truncated else self.text


def show(data: bytes | None) -> Shown:
    if data is None:
        return Shown("null", "null")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Shown("hex", data.hex(" "))
    if text[:1] in ("{", "["):
        try:
            return Shown("json", json.dumps(json.loads(text), indent=2, ensure_ascii=False))
        except ValueError:
            pass
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return Shown("hex", data.hex(" "))
    return Shown("text", text)


@dataclass(frozen=True, slots=True)
class ShownRecord:
    record: ConsumerRecord
    key: Shown
    value: Shown
    headers: tuple[tuple[str, Shown], ...]

    def matches(self, needle: str) -> bool:
        lowered = needle.lower()
        return any(lowered in s.text.lower() for s in (self.key, self.value, *(h for _, h in self.headers))) \
            or any(lowered in name.lower() for name, _ in self.headers)


def shown(record: ConsumerRecord) -> ShownRecord:
    return ShownRecord(record, show(record.key), show(record.value),
                       tuple((name, show(value)) for name, value in record.headers))


@dataclass(frozen=True, slots=True)
class Search:
    partitions: Sequence[int] | None  # None: every partition
    mode: str = "newest"
    limit: int = 50
    offset: int | None = None
    timestamp: str | None = None  # ms since the epoch, or an ISO-8601 date-time
    text_filter: str = ""
    read_committed: bool = False


def timestamp_ms(text: str) -> int:
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        return parse_datetime(text)
    except UsageError as exc:
        raise BrowseError(str(exc)) from None


async def browse(client: KafkaClient, topic: str, search: Search) -> list[ShownRecord]:
    """Up to ``limit`` records per partition from where ``search`` says, filtered, newest first for
    `newest` and in offset order otherwise."""
    admin = AdminClient(client)
    described = (await admin.describe_topics([topic]))[topic]
    chosen = [p.partition for p in described.partitions
              if search.partitions is None or p.partition in search.partitions]
    tps = [TopicPartition(topic, p) for p in chosen]
    isolation = READ_COMMITTED if search.read_committed else READ_UNCOMMITTED
    earliest = await _offsets(admin, tps, OffsetSpec.EARLIEST, isolation)
    ends = await _offsets(admin, tps, OffsetSpec.LATEST, isolation)
    if search.mode == "newest":
        starts = {tp: max(earliest[tp], ends[tp] - search.limit) for tp in tps}
    elif search.mode == "offset":
        if search.offset is None:
            raise BrowseError("Give an offset to seek to")
        starts = {tp: max(earliest[tp], search.offset) for tp in tps}
    elif search.mode == "timestamp":
        if not search.timestamp:
            raise BrowseError("Give a timestamp to seek to")
        found = await _offsets(admin, tps, timestamp_ms(search.timestamp), isolation)
        starts = {tp: found[tp] if found[tp] >= 0 else ends[tp] for tp in tps}
    else:
        starts = dict(earliest)
    fetcher = Fetcher(client, FetchSettings(isolation_level=isolation, max_wait_ms=0))
    records: list[ShownRecord] = []
    for tp in tps:
        records.extend(await _read(fetcher, tp, starts[tp], ends[tp], search))
    if search.mode == "newest":
        records.sort(key=lambda r: (r.record.timestamp, r.record.offset), reverse=True)
    else:
        records.sort(key=lambda r: (r.record.timestamp, r.record.partition, r.record.offset))
    return records


async def _read(fetcher: Fetcher, tp: TopicPartition, start: int, end: int, search: Search) -> list[ShownRecord]:
    found: list[ShownRecord] = []
    position = start
    for _ in range(MAX_FETCH_ROUNDS):
        if position >= end or len(found) >= search.limit:
            break
        fetched = (await fetcher.fetch({tp: position}))[tp]
        if fetched.error is not None:
            raise fetched.error
        for record in fetched.records:
            if record.offset >= end or len(found) >= search.limit:
                break
            candidate = shown(record)
            if not search.text_filter or candidate.matches(search.text_filter):
                found.append(candidate)
        if fetched.next_offset <= position:
            break
        position = fetched.next_offset
    return found


async def one_record(client: KafkaClient, topic: str, partition: int, offset: int) -> ShownRecord | None:
    fetcher = Fetcher(client, FetchSettings(max_wait_ms=0))
    fetched = (await fetcher.fetch({TopicPartition(topic, partition): offset}))[TopicPartition(topic, partition)]
    if fetched.error is not None:
        raise fetched.error
    return next((shown(r) for r in fetched.records if r.offset == offset), None)


async def _offsets(admin: AdminClient, tps: list[TopicPartition], spec: int, isolation: int
                   ) -> dict[TopicPartition, int]:
    listed = await admin.list_offsets({tp: spec for tp in tps}, isolation_level=isolation)
    result = {}
    for tp in tps:
        error = listed[tp].error
        if error is not None:
            raise error
        result[tp] = listed[tp].offset
    return result
