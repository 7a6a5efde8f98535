"""Protobuf schemas: the .proto text printed from a compiled descriptor prints the same once compiled
again, whether it came as text or as a base64 descriptor (so both registrations of a schema are one
schema), Confluent's bundled imports resolve, and what protoc refuses is an InvalidSchemaError with
protoc's reason."""

from __future__ import annotations

import pytest

from pybroker.schema_registry.types import InvalidSchemaError, protobuf

SCHEMAS = [
    'syntax = "proto3"; package a.b; import "google/protobuf/timestamp.proto";'
    "message Outer { message Inner { map<string, Outer> m = 1; } map<int32, string> top = 1; Inner i = 2;"
    " google.protobuf.Timestamp at = 3; oneof pick { string x = 4; int64 y = 5; } optional bool maybe = 6;"
    " reserved 10 to 12, 20; reserved \"gone\"; enum Kind { K0 = 0; K1 = 1; } Kind kind = 7; }",
    'syntax = "proto3"; option java_package = "x.y"; message T { option deprecated = true; '
    'repeated int32 r = 2 [packed = false]; string s = 3 [json_name = "ess", deprecated = true]; }'
    " enum E { option allow_alias = true; A = 0; B = 0; } service S { rpc Go(T) returns (stream T); }",
    'syntax = "proto2"; message P { required int32 a = 1; optional string b = 2 [default = "x\\"y"];'
    " extensions 100 to max; } extend P { optional int32 ext = 100; }",
    'syntax = "proto3"; import "confluent/meta.proto"; import "confluent/type/decimal.proto";'
    " message Money { confluent.type.Decimal amount = 1 [(confluent.field_meta).doc = \"in cents\"]; }",
]


@pytest.mark.parametrize("text", SCHEMAS)
def test_printed_text_compiles_to_the_same_descriptor(text: str) -> None:
    parsed = protobuf.parse(text, {})
    again = protobuf.parse(parsed.canonical(), {})
    assert again.canonical() == parsed.canonical()
    assert [m.name for m in again.descriptor.message_type] == [m.name for m in parsed.descriptor.message_type]
    assert [f.name for f in again.descriptor.message_type[0].field] == \
        [f.name for f in parsed.descriptor.message_type[0].field]
    from_descriptor = protobuf.parse(parsed.serialized(), {})
    assert from_descriptor.canonical() == parsed.canonical()


def test_references_are_files_imported_by_name() -> None:
    dependency = 'syntax = "proto3"; package shop; message Address { string city = 1; }'
    parsed = protobuf.parse('syntax = "proto3"; import "shop/address.proto"; message P { shop.Address home = 1; }',
                            {"shop/address.proto": dependency})
    assert list(parsed.descriptor.dependency) == ["shop/address.proto"]
    assert parsed.descriptor.message_type[0].field[0].type_name == ".shop.Address"


@pytest.mark.parametrize("text,reason", [
    ('syntax = "proto3"; message M { strin a = 1; }', '"strin" is not defined'),
    ('syntax = "proto3"; import "nowhere.proto"; message M {}', "nowhere.proto"),
    ('syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }', "already been used"),
    ("bm90IGEgZGVzY3JpcHRvcg==", "not a serialized FileDescriptorProto"),
])
def test_refused_schemas_say_why(text: str, reason: str) -> None:
    with pytest.raises(InvalidSchemaError, match=reason):
        protobuf.parse(text, {})


def test_a_reference_name_cannot_leave_the_import_root() -> None:
    with pytest.raises(InvalidSchemaError, match="leaves the import root"):
        protobuf.parse('syntax = "proto3"; message M {}', {"../../etc/x.proto": 'syntax = "proto3";'})
