"""Protobuf compatibility on compiled descriptors, as Confluent names its differences: what a reader
compiled from one schema cannot do with bytes written by another (wire types, removed types, oneofs)."""

from __future__ import annotations

from typing import Any, Iterator

# Scalar types that share a wire encoding and decode into one another (protobuf's language guide).
_WIRE_GROUPS = ({3, 4, 5, 13, 8}, {17, 18}, {7, 15}, {6, 16}, {9, 12}, {1}, {2})
_MESSAGE, _ENUM, _LABEL_REQUIRED, _LABEL_REPEATED = 11, 14, 2, 3


def _messages(file: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    stack = [(f".{file.package}" if file.package else "", m) for m in file.message_type]
    while stack:
        prefix, message = stack.pop()
        name = f"{prefix}.{message.name}"
        found[name] = message
        stack.extend((name, nested) for nested in message.nested_type if not nested.options.map_entry)
    return found


def _enums(file: Any) -> dict[str, Any]:
    package = f".{file.package}" if file.package else ""
    found = {f"{package}.{e.name}": e for e in file.enum_type}
    for name, message in _messages(file).items():
        found.update({f"{name}.{e.name}": e for e in message.enum_type})
    return found


def _kind(field: Any) -> str:
    return "message" if field.type == _MESSAGE else "enum" if field.type == _ENUM else "scalar"


def _same_wire(a: int, b: int) -> bool:
    return a == b or any(a in group and b in group for group in _WIRE_GROUPS)


def _differences(reader: Any, writer: Any) -> Iterator[tuple[str, str]]:
    if reader.package != writer.package:
        yield "PACKAGE_CHANGED", writer.package or "(no package)"
    reader_messages, writer_messages = _messages(reader), _messages(writer)
    for name, written in writer_messages.items():
        read = reader_messages.get(name)
        if read is None:
            yield "MESSAGE_REMOVED", name
            continue
        yield from _fields(name, read, written)
    reader_enums = _enums(reader)
    for name in _enums(writer):
        if name not in reader_enums:
            yield "ENUM_REMOVED", name


def _fields(message_name: str, read: Any, written: Any) -> Iterator[tuple[str, str]]:
    reader_fields = {f.number: f for f in read.field}
    writer_fields = {f.number: f for f in written.field}
    moved_into: dict[int, int] = {}
    for number, writer_field in writer_fields.items():
        path = f"{message_name}.{writer_field.name}"
        reader_field = reader_fields.get(number)
        if reader_field is None:
            if writer_field.label == _LABEL_REQUIRED:
                yield "REQUIRED_FIELD_REMOVED", path
            continue
        if _kind(reader_field) != _kind(writer_field):
            yield "FIELD_KIND_CHANGED", path
        elif _kind(writer_field) == "scalar" and not _same_wire(reader_field.type, writer_field.type):
            yield "FIELD_SCALAR_KIND_CHANGED", path
        elif _kind(writer_field) != "scalar" and reader_field.type_name != writer_field.type_name:
            yield "FIELD_NAMED_TYPE_CHANGED", path
        elif (reader_field.label == _LABEL_REPEATED) != (writer_field.label == _LABEL_REPEATED) \
                and (_kind(writer_field) == "message" or writer_field.type in (9, 12)):
            yield "FIELD_LABEL_CHANGED", path
        in_reader_oneof = reader_field.HasField("oneof_index") and not reader_field.proto3_optional
        in_writer_oneof = writer_field.HasField("oneof_index") and not writer_field.proto3_optional
        if in_reader_oneof and not in_writer_oneof:
            oneof = reader_field.oneof_index
            moved_into[oneof] = moved_into.get(oneof, 0) + 1
            existed = any(f.HasField("oneof_index") and f.oneof_index == oneof and f.number in writer_fields
                          and writer_fields[f.number].HasField("oneof_index") for f in read.field)
            if existed:
                yield "FIELD_MOVED_TO_EXISTING_ONEOF", path
    for oneof, count in moved_into.items():
        if count > 1:
            yield "MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"{message_name}.{read.oneof_decl[oneof].name}"
    for number, reader_field in reader_fields.items():
        if number not in writer_fields and reader_field.label == _LABEL_REQUIRED:
            yield "REQUIRED_FIELD_ADDED", f"{message_name}.{reader_field.name}"


def read_errors(reader: Any, writer: Any) -> list[str]:
    return [f"{{errorType:'{kind}', description:'{path}'}}"
            for kind, path in _differences(reader.descriptor, writer.descriptor)]
