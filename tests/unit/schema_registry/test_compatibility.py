"""Compatibility cases per schema type: Avro's schema-resolution rules and Confluent's documented
examples for JSON Schema and Protobuf, checked under BACKWARD, FORWARD, FULL and the transitive levels.

Each case is (old schema, new schema, backward?, forward?): BACKWARD asks whether the new schema reads
data written with the old one, FORWARD the reverse, FULL both.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pybroker.schema_registry import compat
from pybroker.schema_registry.types import avro, json_schema, protobuf


def record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields), **extra})


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


AVRO_CASES = [
    ("field added with a default", record(f("a", "int")), record(f("a", "int"), f("b", "string", default="")), True, True),
    ("field added without a default", record(f("a", "int")), record(f("a", "int"), f("b", "string")), False, True),
    ("field removed that had no default", record(f("a", "int"), f("b", "string")), record(f("a", "int")), True, False),
    ("field removed that had a default", record(f("a", "int"), f("b", "int", default=0)), record(f("a", "int")), True, True),
    ("int promoted to long", record(f("a", "int")), record(f("a", "long")), True, False),
    ("long narrowed to int", record(f("a", "long")), record(f("a", "int")), False, True),
    ("float promoted to double", record(f("a", "float")), record(f("a", "double")), True, False),
    ("string and bytes interchange", record(f("a", "string")), record(f("a", "bytes")), True, True),
    ("int to string", record(f("a", "int")), record(f("a", "string")), False, False),
    ("enum symbol added", json.dumps({"type": "enum", "name": "E", "symbols": ["A"]}),
     json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B"]}), True, False),
    ("enum symbol added with an enum default", json.dumps({"type": "enum", "name": "E", "symbols": ["A"], "default": "A"}),
     json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B"], "default": "A"}), True, True),
    ("type widened to a union holding it", record(f("a", "int")), record(f("a", ["null", "int"])), True, False),
    ("union branch removed", record(f("a", ["null", "int", "string"])), record(f("a", ["null", "int"])), False, True),
    ("record renamed", record(f("a", "int")), record(f("a", "int"), name="S"), False, False),
    ("record renamed with an alias", record(f("a", "int")), record(f("a", "int"), name="S", aliases=["R"]), True, False),
    ("fixed size changed", json.dumps({"type": "fixed", "name": "F", "size": 4}),
     json.dumps({"type": "fixed", "name": "F", "size": 8}), False, False),
    ("array items promoted", json.dumps({"type": "array", "items": "int"}), json.dumps({"type": "array", "items": "long"}),
     True, False),
    ("map values changed", json.dumps({"type": "map", "values": "int"}), json.dumps({"type": "map", "values": "boolean"}),
     False, False),
    ("logical type added to the same primitive", record(f("a", "long")),
     record(f("a", {"type": "long", "logicalType": "timestamp-millis"})), True, True),
]

OPEN = {"type": "object", "properties": {"a": {"type": "integer"}}}
CLOSED = {**OPEN, "additionalProperties": False}


def js(**changes: Any) -> str:
    return json.dumps(changes)


JSON_CASES = [
    ("property added to an open content model", json.dumps(OPEN),
     json.dumps({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}), False, True),
    ("property added to a closed content model", json.dumps(CLOSED),
     json.dumps({**CLOSED, "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}), True, False),
    ("property removed from an open content model", json.dumps({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "string"}}}), json.dumps(OPEN), True, False),
    ("integer widened to number", js(type="integer"), js(type="number"), True, False),
    ("number narrowed to integer", js(type="number"), js(type="integer"), False, True),
    ("type changed", js(type="string"), js(type="boolean"), False, False),
    ("maxLength decreased", js(type="string", maxLength=10), js(type="string", maxLength=5), False, True),
    ("minimum added", js(type="integer"), js(type="integer", minimum=0), False, True),
    ("enum extended", js(enum=["a", "b"]), js(enum=["a", "b", "c"]), True, False),
    ("required property added", json.dumps(OPEN), json.dumps({**OPEN, "required": ["a"]}), False, True),
    ("closed content model opened", json.dumps(CLOSED), json.dumps(OPEN), True, False),
    ("oneOf option added", js(oneOf=[{"type": "string"}]), js(oneOf=[{"type": "string"}, {"type": "integer"}]),
     True, False),
    ("array items widened", js(type="array", items={"type": "integer"}), js(type="array", items={"type": "number"}),
     True, False),
]

PROTO_CASES = [
    ("field added", "message M { string a = 1; }", "message M { string a = 1; int32 b = 2; }", True, True),
    ("field removed", "message M { string a = 1; int32 b = 2; }", "message M { string a = 1; }", True, True),
    ("int32 to int64 (same wire type)", "message M { int32 a = 1; }", "message M { int64 a = 1; }", True, True),
    ("int32 to string", "message M { int32 a = 1; }", "message M { string a = 1; }", False, False),
    ("sint32 to int32 (zigzag differs)", "message M { sint32 a = 1; }", "message M { int32 a = 1; }", False, False),
    ("message removed", "message M { int32 a = 1; } message N { int32 b = 1; }", "message M { int32 a = 1; }",
     False, True),
    ("field renamed, same number", "message M { int32 a = 1; }", "message M { int32 renamed = 1; }", True, True),
    ("field moved into an existing oneof", "message M { int32 a = 1; oneof o { string b = 2; } }",
     "message M { oneof o { int32 a = 1; string b = 2; } }", False, True),
    ("message field type changed", "message A { int32 x = 1; } message B { int32 x = 1; } message M { A f = 1; }",
     "message A { int32 x = 1; } message B { int32 x = 1; } message M { B f = 1; }", False, False),
]


def check(parse: Any, old: str, new: str, level: str) -> list[str]:
    old_schema, new_schema = parse(old, {}), parse(new, {})
    return compat.check(level, new_schema, [compat.Earlier(1, old_schema)])


def _proto(body: str, deps: Any) -> Any:
    return protobuf.parse(f'syntax = "proto3";\npackage shop;\n{body}\n', deps)


@pytest.mark.parametrize("parse,case", [(avro.parse, c) for c in AVRO_CASES] + [(json_schema.parse, c) for c in JSON_CASES]
                         + [(_proto, c) for c in PROTO_CASES], ids=lambda v: v[0] if isinstance(v, tuple) else "")
def test_case(parse: Any, case: tuple[str, str, str, bool, bool]) -> None:
    _, old, new, backward, forward = case
    assert (not check(parse, old, new, "BACKWARD")) is backward
    assert (not check(parse, old, new, "FORWARD")) is forward
    assert (not check(parse, old, new, "FULL")) is (backward and forward)
    assert not check(parse, old, new, "NONE")


def test_transitive_levels_check_every_version() -> None:
    v1 = avro.parse(record(f("a", "int")), {})
    v2 = avro.parse(record(f("a", "int"), f("b", "int", default=0)), {})
    v3 = avro.parse(record(f("a", "int"), f("b", "int")), {})  # drops b's default: reads v2's data, not v1's
    earlier = [compat.Earlier(1, v1), compat.Earlier(2, v2)]
    assert compat.check("BACKWARD", v3, earlier) == []
    problems = compat.check("BACKWARD_TRANSITIVE", v3, earlier)
    assert "{oldSchemaVersion: 1}" in problems and "{compatibility: 'BACKWARD_TRANSITIVE'}" in problems
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in p for p in problems)


def test_avro_normalize_makes_key_order_insignificant() -> None:
    one = avro.parse('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}', {})
    two = avro.parse('{"fields": [{"type": "int", "name": "a"}], "name": "R", "type": "record"}', {})
    assert one.canonical() != two.canonical()
    assert one.normalized().canonical() == two.normalized().canonical()


def test_avro_normalize_keeps_referenced_types_as_references() -> None:
    address = json.dumps({"type": "record", "name": "Address", "namespace": "n",
                          "fields": [{"name": "city", "type": "string"}]})
    user = avro.parse('{"fields": [{"type": "n.Address", "name": "home"}], "name": "User", "type": "record"}',
                      {"n.Address": address})
    normalized = user.normalized().canonical()
    assert json.loads(normalized)["fields"] == [{"name": "home", "type": "n.Address"}]
    assert avro.parse(normalized, {"n.Address": address}).canonical() == normalized  # parses again as stored
