"""The schema types the registry serves: each parses a schema string, gives the string to store and
checks whether one schema can read data written with another.

A type's ``parse`` gets the schema and its references already resolved to their schema strings
(``dependencies``: reference name -> schema, the references of references included, the deepest first),
and raises :class:`InvalidSchemaError` with a reason for anything it cannot use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"


class InvalidSchemaError(ValueError):
    """The schema (or one of its references) cannot be parsed; the message says why."""


class ParsedSchema(Protocol):
    schema_type: str

    def canonical(self) -> str:
        """The schema string stored and answered: the input without insignificant differences."""

    def normalized(self) -> "ParsedSchema":
        """``normalize=true``: a form in which equivalent schemas compare equal."""

    def read_errors(self, writer: "ParsedSchema") -> list[str]:
        """Why data written with ``writer`` cannot be read with this schema (empty: it can)."""


@dataclass(frozen=True, slots=True)
class SchemaType:
    name: str
    parse: Callable[[str, Mapping[str, str]], ParsedSchema]


def schema_type(name: str | None) -> SchemaType:
    """The type for a request's ``schemaType`` (absent: AVRO); InvalidSchemaError for others."""
    if name is not None and not isinstance(name, str):
        raise InvalidSchemaError(f"Invalid schema type {name!r}")
    key = (name or AVRO).upper()
    if key == AVRO:
        from pybroker.schema_registry.types import avro
        return SchemaType(AVRO, avro.parse)
    if key == JSON:
        from pybroker.schema_registry.types import json_schema
        return SchemaType(JSON, json_schema.parse)
    if key == PROTOBUF:
        from pybroker.schema_registry.types import protobuf
        return SchemaType(PROTOBUF, protobuf.parse)
    raise InvalidSchemaError(f"Invalid schema type {name}")
