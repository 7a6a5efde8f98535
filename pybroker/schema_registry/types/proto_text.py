"""A ``FileDescriptorProto`` printed as ``.proto`` text: how the registry stores a Protobuf schema that
arrived as a descriptor, and the one form in which equal schemas compare equal.

Type names stay fully qualified (``.pkg.Message``), which protoc reads back to the same descriptor.
Options of descriptor.proto itself are printed; custom options (extensions of the option messages)
are not kept, and proto2 groups are refused.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from pybroker.schema_registry.types import InvalidSchemaError

_SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
            9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
TYPE_GROUP, TYPE_MESSAGE, TYPE_ENUM, TYPE_STRING, TYPE_BYTES = 10, 11, 14, 9, 12
LABEL_OPTIONAL, LABEL_REQUIRED, LABEL_REPEATED = 1, 2, 3
MAX_FIELD_NUMBER = 536870911
_INDENT = "  "


def render(file: Any) -> str:
    syntax = file.syntax or "proto2"
    if syntax not in ("proto2", "proto3"):
        raise InvalidSchemaError(f"syntax {syntax!r} is not supported")
    lines = [f'syntax = "{syntax}";']
    if file.package:
        lines.append(f"package {file.package};")
    public, weak = set(file.public_dependency), set(file.weak_dependency)
    if file.dependency:
        lines.append("")
        for index, name in enumerate(file.dependency):
            kind = "public " if index in public else "weak " if index in weak else ""
            lines.append(f'import {kind}"{name}";')
    options = list(_options(file.options))
    if options:
        lines.append("")
        lines.extend(f"option {option};" for option in options)
    scope = f".{file.package}" if file.package else ""
    for message in file.message_type:
        lines.append("")
        lines.extend(_message(message, syntax, "", f"{scope}.{message.name}"))
    for enum in file.enum_type:
        lines.append("")
        lines.extend(_enum(enum, ""))
    for block in _extensions(file.extension, syntax, ""):
        lines.append("")
        lines.extend(block)
    for service in file.service:
        lines.append("")
        lines.extend(_service(service))
    return "\n".join(lines) + "\n"


def _value(value: Any, field: Any) -> str:
    if field.type == field.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name if value in field.enum_type.values_by_number else str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bytes):
        return json.dumps(value.decode("latin-1"))
    return repr(value) if isinstance(value, float) else str(value)


def _options(options: Any) -> Iterator[str]:
    for field, value in options.ListFields():
        if field.is_extension or field.message_type is not None or field.name == "uninterpreted_option":
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        values = value if repeated else [value]
        for item in values:
            yield f"{field.name} = {_value(item, field)}"


def _reserved(ranges: Any, names: Any, inclusive_end: bool, indent: str) -> list[str]:
    lines = []
    spans = []
    for span in ranges:
        end = span.end if inclusive_end else span.end - 1
        spans.append(str(span.start) if end == span.start else
                     f"{span.start} to {'max' if end >= MAX_FIELD_NUMBER or end == 2**31 - 1 else end}")
    if spans:
        lines.append(f"{indent}reserved {', '.join(spans)};")
    if names:
        lines.append(f"{indent}reserved {', '.join(json.dumps(name) for name in names)};")
    return lines


def _camel(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(part[:1].upper() + part[1:] for part in parts[1:])


def _field_type(field: Any, maps: dict[str, Any]) -> str:
    if field.type == TYPE_GROUP:
        raise InvalidSchemaError(f"field {field.name}: proto2 groups are not supported")
    if field.type in (TYPE_MESSAGE, TYPE_ENUM):
        entry = maps.get(field.type_name)
        if entry is not None and field.label == LABEL_REPEATED:
            key, value = entry.field[0], entry.field[1]
            return f"map<{_field_type(key, {})}, {_field_type(value, {})}>"
        return field.type_name
    return _SCALARS[field.type]


def _field(field: Any, syntax: str, maps: dict[str, Any], indent: str, in_oneof: bool) -> str:
    type_name = _field_type(field, maps)
    label = ""
    if not in_oneof and not type_name.startswith("map<"):
        if field.label == LABEL_REPEATED:
            label = "repeated "
        elif field.label == LABEL_REQUIRED:
            label = "required "
        elif syntax == "proto2" or field.proto3_optional:
            label = "optional "
    options = list(_options(field.options))
    if field.HasField("default_value"):
        default = field.default_value
        if field.type in (TYPE_STRING, TYPE_BYTES):
            default = json.dumps(default)
        options.insert(0, f"default = {default}")
    if field.HasField("json_name") and field.json_name != _camel(field.name):
        options.append(f"json_name = {json.dumps(field.json_name)}")
    suffix = f" [{', '.join(options)}]" if options else ""
    return f"{indent}{label}{type_name} {field.name} = {field.number}{suffix};"


def _message(message: Any, syntax: str, indent: str, full_name: str) -> list[str]:
    """``full_name`` is the message's fully qualified name, as fields' type names spell it."""
    inner = indent + _INDENT
    lines = [f"{indent}message {message.name} {{"]
    lines.extend(f"{inner}option {option};" for option in _options(message.options))
    lines.extend(_reserved(message.reserved_range, message.reserved_name, False, inner))
    # A map field is a repeated field of a nested *Entry message that protoc generated for it.
    maps = {f"{full_name}.{nested.name}": nested for nested in message.nested_type if nested.options.map_entry}
    real_oneofs = {index for index, _ in enumerate(message.oneof_decl)
                   if not any(f.HasField("oneof_index") and f.oneof_index == index and f.proto3_optional
                              for f in message.field)}
    printed_oneofs: set[int] = set()
    for field in message.field:
        if field.HasField("oneof_index") and field.oneof_index in real_oneofs:
            index = field.oneof_index
            if index in printed_oneofs:
                continue
            printed_oneofs.add(index)
            lines.append(f"{inner}oneof {message.oneof_decl[index].name} {{")
            lines.extend(_field(member, syntax, maps, inner + _INDENT, True) for member in message.field
                         if member.HasField("oneof_index") and member.oneof_index == index)
            lines.append(f"{inner}}}")
        else:
            lines.append(_field(field, syntax, maps, inner, False))
    for span in message.extension_range:
        end = span.end - 1
        lines.append(f"{inner}extensions {span.start} to {'max' if end >= MAX_FIELD_NUMBER else end};"
                     if end != span.start else f"{inner}extensions {span.start};")
    for nested in message.nested_type:
        if not nested.options.map_entry:
            lines.extend(_message(nested, syntax, inner, f"{full_name}.{nested.name}"))
    for enum in message.enum_type:
        lines.extend(_enum(enum, inner))
    for block in _extensions(message.extension, syntax, inner):
        lines.extend(block)
    lines.append(f"{indent}}}")
    return lines


def _enum(enum: Any, indent: str) -> list[str]:
    inner = indent + _INDENT
    lines = [f"{indent}enum {enum.name} {{"]
    lines.extend(f"{inner}option {option};" for option in _options(enum.options))
    lines.extend(_reserved(enum.reserved_range, enum.reserved_name, True, inner))
    for value in enum.value:
        options = list(_options(value.options))
        suffix = f" [{', '.join(options)}]" if options else ""
        lines.append(f"{inner}{value.name} = {value.number}{suffix};")
    lines.append(f"{indent}}}")
    return lines


def _extensions(fields: Any, syntax: str, indent: str) -> Iterator[list[str]]:
    by_extendee: dict[str, list[Any]] = {}
    for field in fields:
        by_extendee.setdefault(field.extendee, []).append(field)
    for extendee, members in by_extendee.items():
        yield [f"{indent}extend {extendee} {{",
               *(_field(field, syntax, {}, indent + _INDENT, False) for field in members), f"{indent}}}"]


def _service(service: Any) -> list[str]:
    lines = [f"service {service.name} {{"]
    lines.extend(f"{_INDENT}option {option};" for option in _options(service.options))
    for method in service.method:
        request = f"stream {method.input_type}" if method.client_streaming else method.input_type
        response = f"stream {method.output_type}" if method.server_streaming else method.output_type
        options = list(_options(method.options))
        body = " {\n" + "".join(f"{_INDENT * 2}option {o};\n" for o in options) + f"{_INDENT}}}" if options else ";"
        lines.append(f"{_INDENT}rpc {method.name}({request}) returns ({response}){body}")
    lines.append("}")
    return lines
