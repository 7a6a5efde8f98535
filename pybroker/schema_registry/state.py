"""The registry's view: the ``_schemas`` topic replayed into subjects, versions, ids, configs and modes.

Every broker's registry keeps one, fed record by record in log order by its reader (store.py); the
leader's writes come back through the same path, so every view converges on the log's contents.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

from pybroker.schema_registry import records
from pybroker.schema_registry.records import Key


@dataclass(frozen=True)
class Content:
    """What an id stands for: the same content registered under several subjects has one id."""

    schema_type: str
    schema: str
    references: tuple[tuple[str, str, int], ...] = ()  # (name, subject, version)
    metadata: Any = None
    rule_set: Any = None

    def identity(self) -> str:
        return self._identity

    @functools.cached_property
    def _identity(self) -> str:  # computed once: lookups compare it with every version of a subject
        return json.dumps([self.schema_type, self.schema, self.references, self.metadata, self.rule_set],
                          sort_keys=True, separators=(",", ":"))

    @functools.cached_property
    def guid(self) -> str:
        return str(uuid.UUID(bytes=hashlib.md5(self.identity().encode()).digest(), version=4))

    def references_json(self) -> list[dict[str, Any]]:
        return [{"name": n, "subject": s, "version": v} for n, s, v in self.references]


@dataclass(slots=True)
class Version:
    subject: str
    version: int
    schema_id: int
    content: Content
    deleted: bool = False


@dataclass
class RegistryState:
    contents: dict[int, Content] = field(default_factory=dict)
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    ids_by_identity: dict[str, int] = field(default_factory=dict)
    configs: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    conflicts: int = 0  # SCHEMA records skipped because an earlier one holds their id or key

    # Replay

    def apply(self, key_bytes: bytes | None, value_bytes: bytes | None) -> None:
        decoded = records.decode(key_bytes, value_bytes)
        if decoded is None:
            return
        key, value = decoded
        if key.keytype == records.SCHEMA:
            self._apply_schema(key, value)
        elif key.keytype == records.CONFIG:
            if value is None:
                self.configs.pop(key.subject, None)
            else:
                self.configs[key.subject] = value
        elif key.keytype == records.MODE:
            if value is None or not isinstance(value.get("mode"), str):
                self.modes.pop(key.subject, None)
            else:
                self.modes[key.subject] = value["mode"]
        elif key.keytype == records.DELETE_SUBJECT and value is not None and key.subject is not None:
            up_to = value.get("version")
            for version in self.subjects.get(key.subject, {}).values():
                if not isinstance(up_to, int) or version.version <= up_to:
                    version.deleted = True
        elif key.keytype == records.CLEAR_SUBJECT and key.subject is not None:
            for number, version in list(self.subjects.get(key.subject, {}).items()):
                if version.deleted:
                    self._remove(key.subject, number)
        elif key.keytype == records.NOOP and key.magic == records.ID_WATERMARK_MAGIC and value is not None:
            if isinstance(value.get("maxId"), int):
                self.max_id = max(self.max_id, value["maxId"])

    def _apply_schema(self, key: Key, value: dict[str, Any] | None) -> None:
        subject, number = key.subject, key.version
        if subject is None or number is None:
            return
        if value is None:
            self._remove(subject, number)
            return
        schema_id, schema = value.get("id"), value.get("schema")
        if not isinstance(schema_id, int) or not isinstance(schema, str):
            return
        references = tuple((r["name"], r["subject"], r["version"]) for r in value.get("references") or ()
                           if isinstance(r, dict) and isinstance(r.get("name"), str)
                           and isinstance(r.get("subject"), str) and isinstance(r.get("version"), int))
        content = Content(value.get("schemaType") or "AVRO", schema, references, value.get("metadata"),
                          value.get("ruleSet"))
        known = self.contents.get(schema_id)
        current = self.subjects.get(subject, {}).get(number)
        if (known is not None and known.identity() != content.identity()) or \
                (current is not None and current.schema_id != schema_id):
            # Two writers raced (a deposed leader's late write): the first record in the log wins, in
            # every view alike, and the losing writer sees that its record did not apply.
            self.conflicts += 1
            return
        self.contents.setdefault(schema_id, content)
        self.ids_by_identity.setdefault(content.identity(), schema_id)
        self.max_id = max(self.max_id, schema_id)
        self.subjects.setdefault(subject, {})[number] = Version(subject, number, schema_id,
                                                                self.contents[schema_id],
                                                                bool(value.get("deleted", False)))

    def _remove(self, subject: str, number: int) -> None:
        versions = self.subjects.get(subject, {})
        removed = versions.pop(number, None)
        if not versions:
            self.subjects.pop(subject, None)
        if removed is not None and not any(v.schema_id == removed.schema_id for v in self.all_versions()):
            content = self.contents.pop(removed.schema_id, None)
            if content is not None and self.ids_by_identity.get(content.identity()) == removed.schema_id:
                del self.ids_by_identity[content.identity()]

    # Queries

    def all_versions(self) -> Iterator[Version]:
        for versions in self.subjects.values():
            yield from versions.values()

    def versions(self, subject: str, *, deleted: bool = False) -> list[Version]:
        return sorted((v for v in self.subjects.get(subject, {}).values() if deleted or not v.deleted),
                      key=lambda v: v.version)

    def live_subjects(self) -> list[str]:
        return sorted(s for s, versions in self.subjects.items() if any(not v.deleted for v in versions.values()))

    def referenced_by(self, subject: str, version: int) -> list[int]:
        return sorted({v.schema_id for v in self.all_versions() if not v.deleted
                       and any(s == subject and n == version for _, s, n in v.content.references)})

    def compatibility(self, subject: str | None) -> str | None:
        config = self.configs.get(subject)
        level = config.get("compatibilityLevel") if config else None
        return level if isinstance(level, str) else None

    def id_for(self, content: Content) -> int | None:
        return self.ids_by_identity.get(content.identity())
