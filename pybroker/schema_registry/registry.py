"""The registry's operations, Confluent's semantics: subjects, versions, ids, compatibility, configs, modes.

Reads answer from this broker's view. Writes run on the leader only (routes.py forwards them), one at
a time: catch up with the log, decide from the view, append one batch, return once it is applied, so
two registrations never get the same id and a failed one leaves nothing behind.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pybroker.schema_registry import compat, errors, records
from pybroker.schema_registry.records import Key
from pybroker.schema_registry.schemas import Parser, reference_tuples
from pybroker.schema_registry.state import Content, RegistryState, Version
from pybroker.schema_registry.store import KafkaStore
from pybroker.schema_registry.types import AVRO, PROTOBUF

READWRITE, READONLY, READONLY_OVERRIDE, IMPORT = "READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT"
MODES = (READWRITE, READONLY, READONLY_OVERRIDE, IMPORT)
MAX_VERSION = 2**31 - 1
WRITE_ATTEMPTS = 3


class _LostRace(Exception):
    """A registration's record did not apply: another writer's came first in the log."""


def parse_version(text: str, *, allow_latest: bool = True) -> int:
    """A path's version: a number in [1, 2^31-1], or ``latest`` / ``-1`` (returned as -1); 42202 otherwise."""
    if allow_latest and text in ("latest", "-1"):
        return -1
    if text.isdigit() and 1 <= int(text) <= MAX_VERSION:
        return int(text)
    raise errors.invalid_version(text)


def schema_body(content: Content, parsed_schema: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if content.schema_type != AVRO:
        body["schemaType"] = content.schema_type
    body["schema"] = parsed_schema if parsed_schema is not None else content.schema
    if content.references:
        body["references"] = content.references_json()
    if content.metadata is not None:
        body["metadata"] = content.metadata
    if content.rule_set is not None:
        body["ruleSet"] = content.rule_set
    return body


def schema_value(subject: str, number: int, schema_id: int, content: Content, *, deleted: bool) -> dict[str, Any]:
    """A SCHEMA record's value in ``_schemas``, as Confluent writes it."""
    return {"subject": subject, "version": number, "id": schema_id, **schema_body(content), "deleted": deleted}


def version_body(version: Version, schema: str | None = None) -> dict[str, Any]:
    return {"subject": version.subject, "version": version.version, "id": version.schema_id,
            "guid": version.content.guid, **schema_body(version.content, schema)}


class SchemaRegistry:
    def __init__(self, store: KafkaStore, *, default_level: str = compat.DEFAULT_LEVEL,
                 max_schema_bytes: int = 1000000) -> None:
        self.store = store
        self.default_level = default_level
        self.max_schema_bytes = max_schema_bytes
        self.parser = Parser()
        self._write_lock = asyncio.Lock()

    async def view(self) -> RegistryState:
        await self.store.ensure_started()
        return self.store.state

    # Reads

    async def schema_by_id(self, schema_id: int, fmt: str | None = None) -> dict[str, Any]:
        state = await self.view()
        content = state.contents.get(schema_id)
        if content is None:
            raise errors.schema_not_found(schema_id)
        return schema_body(content, await self.formatted(state, content, fmt))

    async def formatted(self, state: RegistryState, content: Content, fmt: str | None) -> str | None:
        if fmt == "serialized" and content.schema_type == PROTOBUF:
            parsed = await self.parser.stored(state, content)
            return parsed.serialized()  # type: ignore[attr-defined]
        return None

    async def subjects_of(self, schema_id: int, deleted: bool) -> list[Version]:
        state = await self.view()
        if schema_id not in state.contents:
            raise errors.schema_not_found(schema_id)
        return sorted((v for v in state.all_versions() if v.schema_id == schema_id and (deleted or not v.deleted)),
                      key=lambda v: (v.subject, v.version))

    async def subjects(self, *, deleted: bool = False, deleted_only: bool = False, prefix: str = "") -> list[str]:
        state = await self.view()
        names = []
        for subject in sorted(state.subjects):
            live = bool(state.versions(subject))
            if (deleted_only and not live) or (not deleted_only and (live or deleted)):
                if subject.startswith(prefix):
                    names.append(subject)
        return names

    async def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        state = await self.view()
        versions = state.versions(subject, deleted=deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        return versions

    async def version(self, subject: str, version_text: str, *, deleted: bool = False) -> Version:
        number = parse_version(version_text)
        state = await self.view()
        return self._version(state, subject, number, deleted)

    @staticmethod
    def _version(state: RegistryState, subject: str, number: int, deleted: bool) -> Version:
        versions = state.versions(subject, deleted=deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        if number == -1:
            return versions[-1]
        found = next((v for v in versions if v.version == number), None)
        if found is None:
            raise errors.version_not_found(number)
        return found

    async def referenced_by(self, subject: str, version_text: str) -> list[int]:
        version = await self.version(subject, version_text, deleted=True)
        return self.store.state.referenced_by(subject, version.version)

    async def lookup(self, subject: str, body: dict[str, Any], *, normalize: bool, deleted: bool) -> Version:
        state = await self.view()
        versions = state.versions(subject, deleted=deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        content = await self.content_of(state, subject, body, normalize)
        for version in reversed(versions):
            if version.content.identity() == content.identity():
                return version
        raise errors.schema_not_found()

    async def latest_with_metadata(self, subject: str, wanted: dict[str, str], deleted: bool) -> Version:
        state = await self.view()
        versions = state.versions(subject, deleted=deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        for version in reversed(versions):
            metadata = version.content.metadata or {}
            properties = metadata.get("properties") or {} if isinstance(metadata, dict) else {}
            if all(properties.get(k) == v for k, v in wanted.items()):
                return version
        raise errors.version_not_found(f"with metadata {wanted}")

    async def check_compatibility(self, subject: str, version_text: str | None, body: dict[str, Any], *,
                                  normalize: bool) -> list[str]:
        state = await self.view()
        level = self.level(state, subject)
        content = await self.content_of(state, subject, body, normalize)
        new = await self.parser.stored(state, content)
        if version_text is None:  # compatibility checks of large schemas run off the event loop
            return await asyncio.to_thread(compat.check, level, new, await self._earlier(state, subject, level))
        version = self._version(state, subject, parse_version(version_text), False)
        earlier = [compat.Earlier(version.version, await self.parser.stored(state, version.content))]
        return await asyncio.to_thread(compat.check, level.removesuffix("_TRANSITIVE"), new, earlier)

    async def _earlier(self, state: RegistryState, subject: str, level: str) -> list[compat.Earlier]:
        """The versions ``level`` compares with, parsed: none for NONE, the latest unless transitive."""
        live = state.versions(subject)
        wanted = [] if level == compat.NONE else live if level.endswith("_TRANSITIVE") else live[-1:]
        return [compat.Earlier(v.version, await self.parser.stored(state, v.content)) for v in wanted]

    def level(self, state: RegistryState, subject: str | None) -> str:
        return (state.compatibility(subject) if subject is not None else None) or state.compatibility(None) \
            or self.default_level

    def mode(self, state: RegistryState, subject: str | None) -> str:
        return (state.modes.get(subject) if subject is not None else None) or state.modes.get(None) or READWRITE

    def _normalizing(self, state: RegistryState, subject: str, asked: bool) -> bool:
        if asked:
            return True
        for scope in (subject, None):
            config = state.configs.get(scope)
            if config and isinstance(config.get("normalize"), bool):
                return config["normalize"]
        return False

    async def content_of(self, state: RegistryState, subject: str, body: dict[str, Any], normalize: bool) -> Content:
        """A request's schema as it would be stored (42201 when it does not parse)."""
        references = reference_tuples(body.get("references"))
        parsed = await self.parser.parse(state, body.get("schemaType"), body.get("schema"), references)
        if self._normalizing(state, subject, normalize):
            parsed = parsed.normalized()
        return Content(parsed.schema_type, parsed.canonical(), references, body.get("metadata"), body.get("ruleSet"))

    # Writes (leader only)

    async def register(self, subject: str, body: dict[str, Any], *, normalize: bool) -> Version:
        _check_subject(subject)
        await self.view()
        for _ in range(WRITE_ATTEMPTS - 1):
            try:
                return await self._register(subject, body, normalize)
            except _LostRace:
                continue  # caught up again: the next attempt sees the winner's record
        try:
            return await self._register(subject, body, normalize)
        except _LostRace as lost:
            raise errors.store_error(str(lost)) from None

    async def _register(self, subject: str, body: dict[str, Any], normalize: bool) -> Version:
        async with self._write_lock:
            await self.store.catch_up()
            state = self.store.state
            mode = self.mode(state, subject)
            if mode in (READONLY, READONLY_OVERRIDE):
                raise errors.not_permitted(f"Subject {subject} is in read-only mode")
            content = await self.content_of(state, subject, body, normalize)
            if mode != IMPORT:
                if body.get("id") not in (None, -1):
                    raise errors.not_permitted(f"Subject {subject} is not in import mode")
                for version in reversed(state.versions(subject)):
                    if version.content.identity() == content.identity():
                        return version
                level = self.level(state, subject)
                problems = await asyncio.to_thread(compat.check, level, await self.parser.stored(state, content),
                                                   await self._earlier(state, subject, level))
                if problems:
                    raise errors.incompatible(subject, problems)
                schema_id = state.id_for(content) or state.max_id + 1
                number = max((v.version for v in state.versions(subject, deleted=True)), default=0) + 1
            else:
                schema_id, number = self._imported(state, subject, body, content)
            encoded = records.encode_value(schema_value(subject, number, schema_id, content, deleted=False))
            if len(encoded) > self.max_schema_bytes:
                raise errors.schema_too_large(len(encoded), self.max_schema_bytes)
            await self.store.write([(records.schema_key(subject, number), encoded)])
            applied = self.store.state.subjects.get(subject, {}).get(number)
            if applied is None or applied.schema_id != schema_id or applied.content.identity() != content.identity():
                raise _LostRace(f"Another writer registered subject {subject} version {number} or id {schema_id} "
                                "first")
            return applied

    @staticmethod
    def _imported(state: RegistryState, subject: str, body: dict[str, Any], content: Content) -> tuple[int, int]:
        schema_id, number = body.get("id"), body.get("version")
        if not isinstance(schema_id, int) or isinstance(schema_id, bool) or schema_id < 1:
            raise errors.not_permitted(f"Subject {subject} is in import mode: a schema id must be given")
        existing = state.contents.get(schema_id)
        if existing is not None and existing.identity() != content.identity():
            raise errors.id_does_not_match(f"Overwrite new schema with id {schema_id} is not permitted.")
        latest = max((v.version for v in state.versions(subject, deleted=True)), default=0)
        if number in (None, -1):
            number = latest + 1
        if not isinstance(number, int) or not 1 <= number <= MAX_VERSION:
            raise errors.invalid_version(str(number))
        if number in state.subjects.get(subject, {}):
            raise errors.id_does_not_match(f"Overwrite new schema for subject {subject} version {number} "
                                           "is not permitted.")
        return schema_id, number

    async def delete_subject(self, subject: str, *, permanent: bool) -> list[int]:
        await self.view()
        async with self._write_lock:
            await self.store.catch_up()
            state = self.store.state
            self._writable(state, subject)
            everything = state.versions(subject, deleted=True)
            if not everything:
                raise errors.subject_not_found(subject)
            live = state.versions(subject)
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                self._not_referenced(state, subject, everything)
                entries: list[tuple[Key, bytes | None]] = [(records.schema_key(subject, v.version), None)
                                                           for v in everything]
                entries += self._watermark(state, everything)
                await self.store.write(entries)
                return [v.version for v in everything]
            if not live:
                raise errors.subject_soft_deleted(subject)
            self._not_referenced(state, subject, live)
            await self.store.write([(Key(records.DELETE_SUBJECT, subject), records.encode_value(
                {"subject": subject, "version": live[-1].version}))])
            return [v.version for v in live]

    async def delete_version(self, subject: str, version_text: str, *, permanent: bool) -> int:
        number = parse_version(version_text)
        await self.view()
        async with self._write_lock:
            await self.store.catch_up()
            state = self.store.state
            self._writable(state, subject)
            version = self._version(state, subject, number, permanent)
            self._not_referenced(state, subject, [version])
            key = records.schema_key(subject, version.version)
            if permanent:
                if not version.deleted:
                    raise errors.version_not_soft_deleted(subject, version.version)
                await self.store.write([(key, None), *self._watermark(state, [version])])
                return version.version
            if version.deleted:
                raise errors.version_soft_deleted(subject, version.version)
            value = schema_value(subject, version.version, version.schema_id, version.content, deleted=True)
            await self.store.write([(key, records.encode_value(value))])
            return version.version

    def _writable(self, state: RegistryState, subject: str) -> None:
        if self.mode(state, subject) in (READONLY, READONLY_OVERRIDE):
            raise errors.not_permitted(f"Subject {subject} is in read-only mode")

    @staticmethod
    def _not_referenced(state: RegistryState, subject: str, versions: list[Version]) -> None:
        for version in versions:
            users = state.referenced_by(subject, version.version)
            if users:
                raise errors.reference_exists(f"One or more references exist to the schema "
                                              f"{{subject={subject},version={version.version}}}: ids {users}.")

    @staticmethod
    def _watermark(state: RegistryState, removed: list[Version]) -> list[tuple[Key, bytes | None]]:
        """The id watermark, when a hard delete removes the schema holding the highest id."""
        if any(v.schema_id == state.max_id for v in removed):
            return [(records.ID_WATERMARK_KEY, records.encode_value({"maxId": state.max_id}))]
        return []

    async def set_config(self, subject: str | None, body: dict[str, Any]) -> dict[str, Any]:
        level = body.get("compatibility", body.get("compatibilityLevel"))
        if not isinstance(level, str) or level.upper() not in compat.LEVELS:
            raise errors.invalid_compatibility_level()
        value: dict[str, Any] = {"compatibilityLevel": level.upper()}
        for name in ("normalize", "alias", "validateFields", "defaultMetadata", "overrideMetadata",
                     "defaultRuleSet", "overrideRuleSet", "compatibilityGroup"):
            if body.get(name) is not None:
                value[name] = body[name]
        await self.view()
        async with self._write_lock:
            await self.store.write([(Key(records.CONFIG, subject), records.encode_value(value))])
        answer = dict(value)
        answer["compatibility"] = answer.pop("compatibilityLevel")
        return answer

    async def delete_config(self, subject: str | None) -> dict[str, Any]:
        state = await self.view()
        if subject is not None and subject not in state.subjects:
            raise errors.subject_not_found(subject)
        previous = state.configs.get(subject) or {"compatibilityLevel": self.level(state, subject)}
        async with self._write_lock:
            await self.store.write([(Key(records.CONFIG, subject), None)])
        return previous

    async def set_mode(self, subject: str | None, mode: Any, *, force: bool) -> str:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(str(mode))
        mode = mode.upper()
        state = await self.view()
        if mode == IMPORT and not force:
            has_schemas = bool(state.versions(subject, deleted=True)) if subject is not None \
                else any(True for _ in state.all_versions())
            if has_schemas:
                raise errors.not_permitted("Cannot import since found existing subjects")
        async with self._write_lock:
            await self.store.write([(Key(records.MODE, subject), records.encode_value({"mode": mode}))])
        return mode

    async def delete_mode(self, subject: str) -> str:
        state = await self.view()
        previous = state.modes.get(subject)
        if previous is None:
            raise errors.subject_not_found(subject) if subject not in state.subjects \
                else errors.mode_not_configured(subject)
        async with self._write_lock:
            await self.store.write([(Key(records.MODE, subject), None)])
        return previous


def _check_subject(subject: str) -> None:
    if not subject or subject.strip() != subject or any(ord(c) < 32 for c in subject) or len(subject) > 4096:
        raise errors.invalid_subject(subject)
