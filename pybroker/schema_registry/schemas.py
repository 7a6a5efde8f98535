"""Turning a request's schema into stored content: the type's parser, run off the event loop, with its
references resolved from the view (the references of references too, a cycle refused)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from pybroker.schema_registry import errors
from pybroker.schema_registry.state import Content, RegistryState
from pybroker.schema_registry.types import InvalidSchemaError, ParsedSchema, schema_type

PARSED_CACHE_SIZE = 1000
MAX_REFERENCE_DEPTH = 100


def reference_tuples(references: Any) -> tuple[tuple[str, str, int], ...]:
    """A request's ``references`` as (name, subject, version); 42201 for anything else."""
    if references is None:
        return ()
    if not isinstance(references, list):
        raise errors.invalid_schema("references must be a list")
    result = []
    for reference in references:
        if not isinstance(reference, dict):
            raise errors.invalid_schema("a reference is an object with name, subject and version")
        name, subject, version = reference.get("name"), reference.get("subject"), reference.get("version")
        if not isinstance(name, str) or not isinstance(subject, str) or not isinstance(version, int) \
                or isinstance(version, bool):
            raise errors.invalid_schema(f"reference {reference!r} needs a name, a subject and a version")
        result.append((name, subject, version))
    return tuple(result)


def dependencies(state: RegistryState, references: tuple[tuple[str, str, int], ...], *,
                 deleted: bool = False) -> dict[str, str]:
    """name -> schema of every schema ``references`` reach, the deepest first; 42201 for a missing or
    soft-deleted target and for a cycle."""
    resolved: OrderedDict[str, str] = OrderedDict()

    def visit(refs: tuple[tuple[str, str, int], ...], path: tuple[tuple[str, int], ...]) -> None:
        if len(path) > MAX_REFERENCE_DEPTH:
            raise errors.invalid_schema("references nested too deeply")
        for name, subject, version in refs:
            versions = state.versions(subject, deleted=deleted)
            target = versions[-1] if version == -1 and versions else \
                next((v for v in versions if v.version == version), None)
            if target is None:
                raise errors.invalid_schema(f"Invalid reference {name}: subject {subject} version {version} "
                                            "not found or deleted")
            if (subject, target.version) in path:
                raise errors.invalid_schema(f"Invalid reference {name}: a circular reference through subject "
                                            f"{subject} version {target.version}")
            visit(target.content.references, path + ((subject, target.version),))
            resolved.setdefault(name, target.content.schema)

    visit(references, ())
    return dict(resolved)


class Parser:
    """Parses off the loop; keeps the parsed form of stored content for compatibility checks and formats."""

    def __init__(self) -> None:
        self._cache: OrderedDict[str, ParsedSchema] = OrderedDict()

    async def parse(self, state: RegistryState, type_name: str | None, schema: Any,
                    references: tuple[tuple[str, str, int], ...], *, deleted: bool = False) -> ParsedSchema:
        if not isinstance(schema, str):
            raise errors.invalid_schema("the schema must be a string")
        try:
            kind = schema_type(type_name)
        except InvalidSchemaError as exc:
            raise errors.RegistryError(422, errors.INVALID_SCHEMA, str(exc)) from None
        deps = dependencies(state, references, deleted=deleted)
        try:
            return await asyncio.to_thread(kind.parse, schema, deps)
        except InvalidSchemaError as exc:
            raise errors.invalid_schema(f"{schema[:200]!r}, details: {exc}") from None
        except RecursionError:
            raise errors.invalid_schema("the schema is nested too deeply") from None

    async def stored(self, state: RegistryState, content: Content) -> ParsedSchema:
        key = content.identity()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        parsed = await self.parse(state, content.schema_type, content.schema, content.references, deleted=True)
        self._cache[key] = parsed
        while len(self._cache) > PARSED_CACHE_SIZE:
            self._cache.popitem(last=False)
        return parsed
