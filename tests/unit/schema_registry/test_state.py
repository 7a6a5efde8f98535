"""Replaying ``_schemas`` records (Confluent's format) into the registry's view: soft and hard deletes,
configs and modes, records of other writers, the first record winning a race, and the id watermark that
keeps ids from being reused once compaction has dropped a hard-deleted schema."""

from __future__ import annotations

import json

from pybroker.schema_registry import records
from pybroker.schema_registry.records import Key
from pybroker.schema_registry.state import RegistryState


def schema_record(subject: str, version: int, schema_id: int, schema: str = '"string"', **extra: object
                  ) -> tuple[bytes, bytes]:
    value = {"subject": subject, "version": version, "id": schema_id, "schema": schema, "deleted": False, **extra}
    return records.schema_key(subject, version).encode(), json.dumps(value).encode()


def replay(*entries: tuple[bytes | None, bytes | None]) -> RegistryState:
    state = RegistryState()
    for key, value in entries:
        state.apply(key, value)
    return state


def test_keys_are_confluents_bytes() -> None:
    assert records.schema_key("s", 3).encode() == b'{"keytype":"SCHEMA","subject":"s","version":3,"magic":1}'
    assert Key(records.CONFIG, None).encode() == b'{"keytype":"CONFIG","subject":null,"magic":0}'
    assert records.NOOP_KEY.encode() == b'{"keytype":"NOOP","magic":0}'


def test_a_confluent_written_log_replays() -> None:
    state = replay(
        schema_record("a-value", 1, 1),
        schema_record("b-value", 1, 2, 'syntax = "proto3";', schemaType="PROTOBUF",
                      references=[{"name": "x.proto", "subject": "x", "version": 1}]),
        (b'{"keytype":"CONFIG","subject":"a-value","magic":0}', b'{"compatibilityLevel":"FULL"}'),
        (b'{"keytype":"MODE","subject":null,"magic":0}', b'{"mode":"READONLY"}'),
        (b'{"keytype":"NOOP","magic":0}', None),
        (b"not json", b"{}"), (b'{"keytype":"SOMETHING_NEW"}', b"{}"), (None, b"{}"),  # skipped, as Confluent's reader
    )
    assert [v.schema_id for v in state.versions("a-value")] == [1]
    assert state.contents[2].schema_type == "PROTOBUF" and state.contents[2].references == (("x.proto", "x", 1),)
    assert state.compatibility("a-value") == "FULL" and state.modes[None] == "READONLY"
    assert state.max_id == 2


def test_soft_delete_then_hard_delete() -> None:
    state = replay(schema_record("s", 1, 1), schema_record("s", 2, 2, '"int"'),
                   (Key(records.DELETE_SUBJECT, "s").encode(), b'{"subject":"s","version":2}'))
    assert state.versions("s") == [] and len(state.versions("s", deleted=True)) == 2
    assert state.live_subjects() == []
    state.apply(records.schema_key("s", 1).encode(), None)
    state.apply(records.schema_key("s", 2).encode(), None)
    assert "s" not in state.subjects and state.contents == {} and state.max_id == 2


def test_clear_subject_removes_the_soft_deleted_versions() -> None:
    deleted = schema_record("s", 1, 1)[1].replace(b'"deleted": false', b'"deleted": true')
    state = replay((records.schema_key("s", 1).encode(), deleted), schema_record("s", 2, 2, '"int"'),
                   (Key(records.CLEAR_SUBJECT, "s").encode(), b'{"subject":"s"}'))
    assert [v.version for v in state.versions("s", deleted=True)] == [2]


def test_the_first_record_of_a_race_wins() -> None:
    state = replay(schema_record("s", 1, 7, '"int"'), schema_record("t", 1, 7, '"long"'),  # id 7 taken
                   schema_record("s", 1, 8, '"float"'))  # s/1 taken
    assert state.contents[7].schema == '"int"' and "t" not in state.subjects
    assert state.subjects["s"][1].schema_id == 7 and state.conflicts == 2


def test_the_watermark_outlives_a_compacted_hard_delete() -> None:
    key, value = schema_record("s", 1, 41)
    full_log = [(key, value), (key, None),
                (records.ID_WATERMARK_KEY.encode(), records.encode_value({"maxId": 41}))]
    assert replay(*full_log).max_id == 41
    compacted = full_log[1:]  # the cleaner keeps the tombstone (for a while) and the watermark, not the schema
    assert replay(*compacted).max_id == 41
    assert replay(*compacted[1:]).max_id == 41
