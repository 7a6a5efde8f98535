"""JSON Schema (drafts 4, 6, 7, 2019-09 and 2020-12, by ``$schema``; draft 7 without one), checked by the
``jsonschema`` package; references are other schemas named by the URI a ``$ref`` uses.

Compatibility compares a reader schema with a writer schema the way Confluent's JSON Schema checker
names its differences: a type narrowed, a property added to an open content model, a required property
added, limits tightened, enum values removed, a closed content model opened or closed.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping

from pybroker.schema_registry.types import JSON, InvalidSchemaError

_UNKNOWN: Any = object()


class JsonSchema:
    schema_type = JSON

    def __init__(self, document: Any, dependencies: Mapping[str, Any]) -> None:
        self.document = document
        self.dependencies = dict(dependencies)

    def canonical(self) -> str:
        return json.dumps(self.document, separators=(",", ":"), ensure_ascii=False)

    def normalized(self) -> JsonSchema:
        return JsonSchema(_sorted(self.document), self.dependencies)

    def read_errors(self, writer: Any) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return [f"Incompatible schema type {writer.schema_type}"]
        resolver = _Resolver(self, writer)
        return [f"{{errorType:'{kind}', description:'{path or '#/'}'}}"
                for kind, path in _compare(writer.document, self.document, "#", resolver, 0)]


def _sorted(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _sorted(node[key]) for key in sorted(node)}
    if isinstance(node, list):
        return [_sorted(item) for item in node]
    return node


def parse(text: str, dependencies: Mapping[str, str]) -> JsonSchema:
    try:
        import jsonschema
        import jsonschema.validators
    except ImportError:
        raise InvalidSchemaError("JSON schemas need the schema-registry extra: "
                                 "pip install 'pybroker[schema-registry]' (jsonschema)") from None

    try:
        document = json.loads(text)
        references = {name: json.loads(value) for name, value in dependencies.items()}
    except (ValueError, RecursionError) as exc:
        raise InvalidSchemaError(f"Invalid JSON: {exc}") from None
    if not isinstance(document, (dict, bool)):
        raise InvalidSchemaError("a JSON Schema is an object or a boolean")
    for name, schema in {"": document, **references}.items():
        if isinstance(schema, bool):
            continue
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"reference {name} is not a JSON Schema")
        validator = jsonschema.validators.validator_for(schema, default=_UNKNOWN) if "$schema" in schema \
            else jsonschema.Draft7Validator
        if validator is _UNKNOWN:
            raise InvalidSchemaError(f"unknown $schema {schema['$schema']!r}")
        try:
            validator.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise InvalidSchemaError(f"{exc.message} at {'/'.join(map(str, exc.absolute_path)) or 'the root'}") from None
        except RecursionError:
            raise InvalidSchemaError("schema nested too deeply") from None
    for ref in _refs(document):
        target = ref.split("#", 1)[0]
        if target and target not in references and not _local_id(document, target):
            raise InvalidSchemaError(f"$ref {ref!r} names no reference of this schema")
    return JsonSchema(document, references)


def _refs(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _local_id(document: Any, uri: str) -> bool:
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("$id") == uri or item.get("id") == uri:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class _Resolver:
    """Follows ``$ref`` within a schema and into its references, for either side of a comparison."""

    def __init__(self, reader: JsonSchema, writer: JsonSchema) -> None:
        self.roots = {id(reader.document): reader, id(writer.document): writer}
        self.documents = {**writer.dependencies, **reader.dependencies}
        self.reader_root, self.writer_root = reader.document, writer.document

    def resolve(self, node: Any, root: Any) -> tuple[Any, Any]:
        seen = 0
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and seen < 32:
            seen += 1
            target, _, pointer = node["$ref"].partition("#")
            if target:
                root = self.documents.get(target, {})
            node = root
            for part in filter(None, pointer.split("/")):
                part = part.replace("~1", "/").replace("~0", "~")
                node = node.get(part, {}) if isinstance(node, dict) else \
                    node[int(part)] if isinstance(node, list) and part.isdigit() and int(part) < len(node) else {}
        return node, root


def _types(schema: Any) -> set[str] | None:
    if not isinstance(schema, dict) or "type" not in schema:
        return None
    declared = schema["type"]
    return set(declared if isinstance(declared, list) else [declared])


def _accepts(reader_types: set[str], writer_type: str) -> bool:
    return writer_type in reader_types or (writer_type == "integer" and "number" in reader_types)


def _open(schema: dict[str, Any]) -> bool:
    additional = schema.get("additionalProperties", True)
    return additional is not False and schema.get("unevaluatedProperties", True) is not False


def _compare(writer: Any, reader: Any, path: str, resolver: _Resolver, depth: int,
             writer_root: Any = None, reader_root: Any = None) -> Iterator[tuple[str, str]]:
    """The differences that make data valid under ``writer`` possibly invalid under ``reader``."""
    if depth > 64:
        return
    writer, writer_root = resolver.resolve(writer, writer_root if writer_root is not None else resolver.writer_root)
    reader, reader_root = resolver.resolve(reader, reader_root if reader_root is not None else resolver.reader_root)
    if reader is True or reader == {}:
        return
    if reader is False:
        if writer is not False:
            yield "SCHEMA_NARROWED", path
        return
    if writer is False:
        return
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return
    if writer == {} and reader != {}:
        yield "TYPE_NARROWED", path
        return
    for combiner in ("oneOf", "anyOf"):
        if combiner in reader or combiner in writer:
            yield from _compare_combined(writer, reader, combiner, path, resolver, depth, writer_root, reader_root)
            return
    reader_types, writer_types = _types(reader), _types(writer)
    if reader_types is not None:
        if writer_types is None:
            yield "TYPE_CHANGED", path
            return
        lost = {t for t in writer_types if not _accepts(reader_types, t)}
        if lost:
            narrowed = writer_types - lost or (lost == {"number"} and "integer" in reader_types)
            yield ("TYPE_NARROWED" if narrowed else "TYPE_CHANGED"), path
            return
    yield from _compare_limits(writer, reader, path)
    if "enum" in reader:
        if "enum" not in writer:
            yield "ENUM_ARRAY_CHANGED", path
        elif any(value not in reader["enum"] for value in writer["enum"]):
            yield "ENUM_ARRAY_NARROWED", path
    if "const" in reader and writer.get("const", object()) != reader["const"]:
        yield "CONST_CHANGED", path
    yield from _compare_object(writer, reader, path, resolver, depth, writer_root, reader_root)
    if "items" in reader or "items" in writer:
        reader_items, writer_items = reader.get("items", {}), writer.get("items", {})
        if isinstance(reader_items, dict) and isinstance(writer_items, dict):
            yield from _compare(writer_items, reader_items, f"{path}/items", resolver, depth + 1, writer_root,
                                reader_root)
        elif reader_items != writer_items:
            yield "ITEMS_CHANGED", f"{path}/items"


_LIMITS = (  # (keyword, the reader's change that rejects writer data)
    ("maxLength", "MAX_LENGTH", "decreased"), ("minLength", "MIN_LENGTH", "increased"),
    ("maximum", "MAXIMUM", "decreased"), ("minimum", "MINIMUM", "increased"),
    ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM", "decreased"), ("exclusiveMinimum", "EXCLUSIVE_MINIMUM", "increased"),
    ("maxItems", "MAX_ITEMS", "decreased"), ("minItems", "MIN_ITEMS", "increased"),
    ("maxProperties", "MAX_PROPERTIES", "decreased"), ("minProperties", "MIN_PROPERTIES", "increased"),
)


def _compare_limits(writer: dict[str, Any], reader: dict[str, Any], path: str) -> Iterator[tuple[str, str]]:
    for keyword, name, tighter in _LIMITS:
        if keyword not in reader or isinstance(reader[keyword], bool):
            continue
        if keyword not in writer or isinstance(writer[keyword], bool):
            yield f"{name}_ADDED", path
        elif (reader[keyword] < writer[keyword]) if tighter == "decreased" else (reader[keyword] > writer[keyword]):
            yield f"{name}_{tighter.upper()}", path
    if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
        yield ("PATTERN_CHANGED" if "pattern" in writer else "PATTERN_ADDED"), path
    if "multipleOf" in reader and reader["multipleOf"] != writer.get("multipleOf"):
        writer_step = writer.get("multipleOf")
        if not (isinstance(writer_step, (int, float)) and writer_step % reader["multipleOf"] == 0):
            yield ("MULTIPLE_OF_CHANGED" if writer_step is not None else "MULTIPLE_OF_ADDED"), path


def _compare_object(writer: dict[str, Any], reader: dict[str, Any], path: str, resolver: _Resolver, depth: int,
                    writer_root: Any, reader_root: Any) -> Iterator[tuple[str, str]]:
    reader_properties, writer_properties = reader.get("properties", {}), writer.get("properties", {})
    if not isinstance(reader_properties, dict) or not isinstance(writer_properties, dict):
        return
    for name in sorted(set(reader.get("required", [])) - set(writer.get("required", []))):
        yield "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL" if not _open(writer) else "REQUIRED_ATTRIBUTE_ADDED", \
            f"{path}/required/{name}"
    if _open(writer) and not _open(reader):
        yield "ADDITIONAL_PROPERTIES_REMOVED", path
    for name, schema in writer_properties.items():
        if name in reader_properties:
            yield from _compare(schema, reader_properties[name], f"{path}/properties/{name}", resolver, depth + 1,
                                writer_root, reader_root)
        elif not _open(reader):
            yield "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", f"{path}/properties/{name}"
        elif isinstance(reader.get("additionalProperties"), dict):
            yield from _compare(schema, reader["additionalProperties"], f"{path}/properties/{name}", resolver,
                                depth + 1, writer_root, reader_root)
    for name, schema in reader_properties.items():
        if name in writer_properties or schema in ({}, True):
            continue
        if _open(writer):
            additional = writer.get("additionalProperties")
            if isinstance(additional, dict):  # the writer's extra properties all follow this schema
                yield from _compare(additional, schema, f"{path}/properties/{name}", resolver, depth + 1,
                                    writer_root, reader_root)
            else:
                yield "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", f"{path}/properties/{name}"


def _compare_combined(writer: dict[str, Any], reader: dict[str, Any], combiner: str, path: str,
                      resolver: _Resolver, depth: int, writer_root: Any, reader_root: Any
                      ) -> Iterator[tuple[str, str]]:
    reader_options = reader.get(combiner) or reader.get("oneOf") or reader.get("anyOf") or [reader]
    writer_options = writer.get(combiner) or writer.get("oneOf") or writer.get("anyOf") or [writer]
    if not isinstance(reader_options, list) or not isinstance(writer_options, list):
        return
    for index, option in enumerate(writer_options):
        if not any(not list(_compare(option, candidate, path, resolver, depth + 1, writer_root, reader_root))
                   for candidate in reader_options):
            yield "COMBINED_TYPE_SUBSCHEMAS_CHANGED", f"{path}/{combiner}/{index}"
