"""Avro schemas, parsed by the Apache ``avro`` package: named types, logical types, defaults, references.

The stored string is the schema's JSON without insignificant whitespace (as Confluent stores Avro's
``Schema.toString()``), and two registrations are the same schema (one id) when those strings are equal.
Not the Parsing Canonical Form's fingerprint: it drops defaults, docs and aliases, which change how data
is read. ``normalize`` orders attributes as the Parsing Canonical Form does while keeping them.
Compatibility follows Avro's schema-resolution rules (the ``avro.compatibility`` checker ports Java's
``SchemaCompatibility``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import avro.compatibility
import avro.errors
import avro.name
import avro.schema

from pybroker.schema_registry.types import AVRO, InvalidSchemaError

_CANONICAL_ORDER = ("name", "type", "fields", "symbols", "items", "values", "size", "default", "logicalType",
                    "precision", "scale", "aliases", "order", "doc", "namespace")


class AvroSchema:
    schema_type = AVRO

    def __init__(self, text: str, document: Any, schema: avro.schema.Schema,
                 referenced: Mapping[str, avro.schema.NamedSchema]) -> None:
        self.text = text
        self.document = document
        self.schema = schema
        self.referenced = dict(referenced)  # the named types the references define, by full name

    def canonical(self) -> str:
        return json.dumps(self.document, separators=(",", ":"), ensure_ascii=False)

    def normalized(self) -> AvroSchema:
        names = avro.name.Names()
        names.names = dict(self.referenced)  # referenced types stay references, not inlined copies
        document = _normalize(self.schema.to_json(names))
        return AvroSchema(self.text, document, self.schema, self.referenced)

    def read_errors(self, writer: Any) -> list[str]:
        if not isinstance(writer, AvroSchema):
            return [f"Incompatible schema type {writer.schema_type}"]
        result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(self.schema, writer.schema)
        if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
            return []
        kinds = sorted(kind.name.upper() for kind in result.incompatibilities)
        return [f"{{errorType:'{kind}', description:'{message}', additionalInfo:'at {location}'}}"
                for kind, message, location in zip(kinds, sorted(result.messages), sorted(result.locations))] \
            or ["incompatible"]


def _normalize(node: Any) -> Any:
    if isinstance(node, dict):
        ordered = {key: _normalize(node[key]) for key in _CANONICAL_ORDER if key in node}
        ordered.update({key: _normalize(value) for key, value in sorted(node.items()) if key not in ordered})
        return ordered
    if isinstance(node, list):
        return [_normalize(item) for item in node]
    return node


def parse(text: str, dependencies: Mapping[str, str]) -> AvroSchema:
    names = avro.name.Names()
    try:
        for name, dependency in dependencies.items():
            try:
                avro.schema.make_avsc_object(json.loads(dependency), names)
            except (ValueError, avro.errors.AvroException) as exc:
                raise InvalidSchemaError(f"reference {name}: {exc}") from None
        referenced = dict(names.names)
        document = json.loads(text)
        schema = avro.schema.make_avsc_object(document, names)
    except InvalidSchemaError:
        raise
    except RecursionError:
        raise InvalidSchemaError("schema nested too deeply") from None
    except (ValueError, TypeError, AttributeError, avro.errors.AvroException) as exc:
        raise InvalidSchemaError(str(exc) or type(exc).__name__) from None
    return AvroSchema(text, document, schema, referenced)
