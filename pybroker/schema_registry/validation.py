"""Broker-side schema validation, opt-in per topic as Confluent Server's: with
``confluent.value.schema.validation=true`` (or ``confluent.key.schema.validation``) a produced record's
value (key) must start with the wire format's magic byte 0 and a schema id registered under the
topic's subject, else the batch is refused with INVALID_RECORD naming each record (KIP-467).

Topics that do not ask pay one dictionary lookup per produced partition. The check is split in two:
`scan` reads the records (the costly part: a big batch's runs on an I/O thread with its other record
checks) and keeps each schema id they carry once; `Scanned.judge` then looks each id up in this broker's
registry view (which follows ``_schemas`` within the reader's next fetch) on the event loop, which owns it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Mapping

from pybroker.records import RecordBatch
from pybroker.records.errors import RecordValidationError
from pybroker.schema_registry.state import RegistryState

_PACKAGE = "io.confluent.kafka.serializers.subject."
TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME = "TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"
STRATEGIES = (TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME)
MAGIC_BYTE = 0
MAX_ERRORS_LISTED = 100


@dataclass(frozen=True, slots=True)
class TopicKey:
    type: str
    default: str
    doc: str


TOPIC_KEYS: dict[str, TopicKey] = {
    "confluent.key.schema.validation": TopicKey(
        "boolean", "false", "Refuse records whose key does not carry the id of a schema registered under the "
                            "key subject (the broker's schema registry)."),
    "confluent.value.schema.validation": TopicKey(
        "boolean", "false", "Refuse records whose value does not carry the id of a schema registered under the "
                            "value subject (the broker's schema registry)."),
    "confluent.key.subject.name.strategy": TopicKey(
        "string", _PACKAGE + TOPIC_NAME, "How the key subject is named: TopicNameStrategy (<topic>-key), "
                                         "RecordNameStrategy or TopicRecordNameStrategy."),
    "confluent.value.subject.name.strategy": TopicKey(
        "string", _PACKAGE + TOPIC_NAME, "How the value subject is named: TopicNameStrategy (<topic>-value), "
                                         "RecordNameStrategy or TopicRecordNameStrategy."),
}


def strategy_name(text: str) -> str:
    name = text.strip().removeprefix(_PACKAGE)
    if name not in STRATEGIES:
        raise ValueError(f"Invalid value {text} for a subject name strategy: one of {', '.join(STRATEGIES)}")
    return name


def validate_configs(overrides: Mapping[str, str | None]) -> None:
    """ValueError naming a schema-validation topic config with an unusable value."""
    for side in ("key", "value"):
        flag = overrides.get(f"confluent.{side}.schema.validation")
        if flag is not None and flag.lower() not in ("true", "false"):
            raise ValueError(f"Invalid value {flag} for configuration confluent.{side}.schema.validation")
        strategy = overrides.get(f"confluent.{side}.subject.name.strategy")
        if strategy is not None:
            strategy_name(strategy)


@dataclass(frozen=True, slots=True)
class Side:
    is_key: bool
    strategy: str


class SchemaValidation:
    """The topics that ask for validation, and the check of a produced batch against the registry view."""

    def __init__(self, view: Callable[[], RegistryState | None]) -> None:
        self.view = view
        self.topics: dict[str, tuple[Side, ...]] = {}

    def on_topic_change(self, name: str, configs: Mapping[str, str] | None) -> None:
        sides = []
        for side in ("key", "value"):
            if configs and configs.get(f"confluent.{side}.schema.validation", "false").lower() == "true":
                strategy = configs.get(f"confluent.{side}.subject.name.strategy", _PACKAGE + TOPIC_NAME)
                sides.append(Side(side == "key", strategy_name(strategy)))
        if sides:
            self.topics[name] = tuple(sides)
        else:
            self.topics.pop(name, None)

    def reason(self, state: RegistryState | None, topic: str, side: Side, schema_id: int) -> str | None:
        """Why a record carrying ``schema_id`` breaks the side's rule, or None (one registry lookup per id)."""
        what = "key" if side.is_key else "value"
        if state is None:
            return f"Topic {topic} validates {what}s, but this broker's schema registry is off or not started"
        content = state.contents.get(schema_id)
        if content is None:
            return f"Schema id {schema_id} of the record {what} is not registered"
        subject = self._subject(topic, side, content.schema_type, content.schema)
        if subject is None or not any(v.schema_id == schema_id for v in state.versions(subject)):
            return f"Schema id {schema_id} of the record {what} is not registered under subject {subject}"
        return None

    @staticmethod
    def _subject(topic: str, side: Side, schema_type: str, schema: str) -> str | None:
        suffix = "key" if side.is_key else "value"
        if side.strategy == TOPIC_NAME:
            return f"{topic}-{suffix}"
        name = _record_name(schema_type, schema)
        if name is None:
            return None
        return name if side.strategy == RECORD_NAME else f"{topic}-{name}"


def _record_name(schema_type: str, schema: str) -> str | None:
    """The fully qualified record name an Avro schema (name, namespace) or JSON Schema (title) declares."""
    try:
        document = json.loads(schema)
    except ValueError:
        return None  # Protobuf: the name comes from the message index, which this check does not decode
    if not isinstance(document, dict):
        return None
    if schema_type == "JSON":
        return document.get("title")
    name, namespace = document.get("name"), document.get("namespace")
    if not isinstance(name, str):
        return None
    return name if "." in name or not namespace else f"{namespace}.{name}"


Token = int | str
"""What a record carries on one side: a schema id to look up, or why it fails without a lookup (``{topic}`` left
to fill in)."""


@dataclass(slots=True)
class Scanned:
    """Per side, each token the batch's records carry with the first MAX_ERRORS_LISTED records carrying it:
    enough to name the first MAX_ERRORS_LISTED failing records, each with its first failing side's reason."""

    sides: tuple[Side, ...]
    found: list[dict[Token, list[int]]] = field(default_factory=list)

    def judge(self, validation: SchemaValidation, topic: str) -> None:
        """RecordValidationError listing the records that fail (one registry lookup per distinct id)."""
        state = validation.view()
        failing: dict[int, str] = {}
        for side, found in zip(self.sides, self.found):  # in side order: a record keeps its first reason
            for token, records in found.items():
                reason = (token.format(topic=topic) if isinstance(token, str)
                          else validation.reason(state, topic, side, token))
                if reason is not None:
                    for index in records:
                        failing.setdefault(index, reason)
        if failing:
            raise RecordValidationError(sorted(failing.items())[:MAX_ERRORS_LISTED], False)


def scan(sides: tuple[Side, ...], batch: RecordBatch) -> Scanned:
    """The tokens of the batch's records (reads only the batch: safe on any thread)."""
    scanned = Scanned(sides, [{} for _ in sides])
    pairs = tuple(zip(sides, scanned.found))
    for index, record in enumerate(batch.records()):
        for side, found in pairs:
            token = _token(side, record.key if side.is_key else record.value)
            if token is None:
                continue
            records = found.get(token)
            if records is None:
                found[token] = [index]
            elif len(records) < MAX_ERRORS_LISTED:
                records.append(index)
    return scanned


def _token(side: Side, data: bytes | None) -> Token | None:
    if data is None:
        return "Record has no key but topic {topic} validates keys" if side.is_key else None
    if len(data) < 5 or data[0] != MAGIC_BYTE:
        return f"Record {'key' if side.is_key else 'value'} does not start with the schema registry's magic byte " \
               "and a schema id"
    return int.from_bytes(data[1:5], "big")
