"""Confluent's REST API v1 mapped onto the registry: paths, query parameters, JSON bodies and answers.

Each route says whether it writes: a write that reaches a follower is forwarded to the leader
(service.py), so only the leader's registry ever appends to ``_schemas``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

from pybroker.schema_registry import errors
from pybroker.schema_registry.http import Request
from pybroker.schema_registry.registry import SchemaRegistry, parse_version, version_body
from pybroker.schema_registry.types import AVRO, JSON, PROTOBUF

Answer = Any  # JSON-able, or RawText for the /schema endpoints
Action = Callable[[SchemaRegistry, Request, list[str]], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class RawText:
    """An answer sent as is (the schema string of ``.../schema``), not as JSON."""

    text: str


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: tuple[str, ...]  # "*" matches one segment, handed to the action
    action: Action
    writes: bool = False
    operation: str = "read"  # for authorization: read, write (schemas), config (configs and modes)


def _body(request: Request) -> dict[str, Any]:
    if not request.body:
        raise errors.bad_request("A JSON body is required", 400)
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.RegistryError(422, 422, f"Unrecognized JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise errors.RegistryError(422, 422, "The body must be a JSON object")
    return body


def _schema_id(text: str) -> int:
    if text.isdigit() and 0 < int(text) < 2**31:
        return int(text)
    raise errors.schema_not_found()


async def root(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return {}


async def schema_types(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return [JSON, PROTOBUF, AVRO]  # Confluent's order


async def contexts(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return ["."]


async def schema_by_id(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    schema_id = _schema_id(args[0])
    body = await registry.schema_by_id(schema_id, request.param("format"))
    if request.flag("fetchMaxId"):
        body["maxId"] = (await registry.view()).max_id
    return body


async def schema_by_guid(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    state = await registry.view()
    for schema_id, content in state.contents.items():
        if content.guid == args[0]:
            return await registry.schema_by_id(schema_id, request.param("format"))
    raise errors.schema_not_found()


async def schema_text_by_id(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return RawText((await registry.schema_by_id(_schema_id(args[0]), request.param("format")))["schema"])


async def subjects_of_id(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    versions = await registry.subjects_of(_schema_id(args[0]), request.flag("deleted"))
    return sorted({v.subject for v in versions})


async def versions_of_id(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    versions = await registry.subjects_of(_schema_id(args[0]), request.flag("deleted"))
    return [{"subject": v.subject, "version": v.version} for v in versions]


async def list_schemas(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    state = await registry.view()
    prefix, deleted = request.param("subjectPrefix", "") or "", request.flag("deleted")
    answers: list[dict[str, Any]] = []
    for subject in sorted(state.subjects):
        if not subject.startswith(prefix):
            continue
        versions = state.versions(subject, deleted=deleted)
        if request.flag("latestOnly"):
            versions = versions[-1:]
        answers.extend(version_body(v) for v in versions)
    offset, limit = _int_param(request, "offset", 0), _int_param(request, "limit", -1)
    return answers[offset:] if limit < 0 else answers[offset:offset + limit]


def _int_param(request: Request, name: str, default: int) -> int:
    text = request.param(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise errors.RegistryError(422, 422, f"Query parameter {name} must be an integer, got {text!r}") from None


async def subjects(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return await registry.subjects(deleted=request.flag("deleted"), deleted_only=request.flag("deletedOnly"),
                                   prefix=request.param("subjectPrefix", "") or "")


async def lookup(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    version = await registry.lookup(args[0], _body(request), normalize=request.flag("normalize"),
                                    deleted=request.flag("deleted"))
    return version_body(version)


async def delete_subject(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return await registry.delete_subject(args[0], permanent=request.flag("permanent"))


async def register(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    version = await registry.register(args[0], _body(request), normalize=request.flag("normalize"))
    return version_body(version)


async def list_versions(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return [v.version for v in await registry.versions(args[0], request.flag("deleted"))]


async def get_version(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    version = await registry.version(args[0], args[1], deleted=request.flag("deleted"))
    state = await registry.view()
    return version_body(version, await registry.formatted(state, version.content, request.param("format")))


async def get_version_text(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return RawText((await get_version(registry, request, args))["schema"])


async def delete_version(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return await registry.delete_version(args[0], args[1], permanent=request.flag("permanent"))


async def referenced_by(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return await registry.referenced_by(args[0], args[1])


async def subject_metadata(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    keys, values = request.query.get("key", []), request.query.get("value", [])
    version = await registry.latest_with_metadata(args[0], dict(zip(keys, values)), request.flag("deleted"))
    return version_body(version)


async def compatibility(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    subject, version = args[0], args[1] if len(args) > 1 else None
    if version is not None:
        parse_version(version)
    body = _body(request)
    state = await registry.view()
    if not state.versions(subject):
        if version is not None:
            raise errors.subject_not_found(subject)
        await registry.content_of(state, subject, body, request.flag("normalize"))  # still 42201 for a bad schema
        return {"is_compatible": True, **({"messages": []} if request.flag("verbose") else {})}
    problems = await registry.check_compatibility(subject, version, body, normalize=request.flag("normalize"))
    answer: dict[str, Any] = {"is_compatible": not problems}
    if request.flag("verbose"):
        answer["messages"] = problems
    return answer


def _scoped(request: Request, args: list[str], table: dict[str | None, Any],
            not_configured: Callable[[str], errors.RegistryError]) -> tuple[str | None, Any]:
    """A subject's own config or mode (args[0]), or the global one: 404 for a subject without its own
    unless ``defaultToGlobal=true``; None when neither is set."""
    subject = args[0] if args else None
    own = table.get(subject)
    if own is None and subject is not None:
        if not request.flag("defaultToGlobal"):
            raise not_configured(subject)
        own = table.get(None)
    return subject, own


async def get_config(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    state = await registry.view()
    _, config = _scoped(request, args, state.configs, errors.compatibility_not_configured)
    return config or {"compatibilityLevel": registry.default_level}


async def put_config(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return await registry.set_config(args[0] if args else None, _body(request))


async def delete_config(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    return await registry.delete_config(args[0] if args else None)


async def get_mode(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    state = await registry.view()
    _, mode = _scoped(request, args, state.modes, errors.mode_not_configured)
    return {"mode": mode or registry.mode(state, None)}


async def put_mode(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    mode = await registry.set_mode(args[0] if args else None, _body(request).get("mode"), force=request.flag("force"))
    return {"mode": mode}


async def delete_mode(registry: SchemaRegistry, request: Request, args: list[str]) -> Answer:
    if not args:
        raise errors.bad_request("The global mode cannot be deleted; set it to READWRITE", 405)
    return {"mode": await registry.delete_mode(args[0])}


def _r(method: str, path: str, action: Action, operation: str = "read") -> Route:
    return Route(method, tuple(path.strip("/").split("/")) if path.strip("/") else (), action,
                 writes=operation != "read", operation=operation)


ROUTES = (
    _r("GET", "/", root),
    _r("GET", "/schemas", list_schemas),
    _r("GET", "/schemas/types", schema_types),
    _r("GET", "/schemas/ids/*", schema_by_id),
    _r("GET", "/schemas/ids/*/schema", schema_text_by_id),
    _r("GET", "/schemas/ids/*/subjects", subjects_of_id),
    _r("GET", "/schemas/ids/*/versions", versions_of_id),
    _r("GET", "/schemas/guids/*", schema_by_guid),
    _r("GET", "/contexts", contexts),
    _r("GET", "/subjects", subjects),
    _r("POST", "/subjects/*", lookup),
    _r("DELETE", "/subjects/*", delete_subject, "write"),
    _r("GET", "/subjects/*/versions", list_versions),
    _r("POST", "/subjects/*/versions", register, "write"),
    _r("GET", "/subjects/*/versions/*", get_version),
    _r("GET", "/subjects/*/versions/*/schema", get_version_text),
    _r("DELETE", "/subjects/*/versions/*", delete_version, "write"),
    _r("GET", "/subjects/*/versions/*/referencedby", referenced_by),
    _r("GET", "/subjects/*/metadata", subject_metadata),
    _r("POST", "/compatibility/subjects/*/versions", compatibility),
    _r("POST", "/compatibility/subjects/*/versions/*", compatibility),
    _r("GET", "/config", get_config),
    _r("PUT", "/config", put_config, "config"),
    _r("DELETE", "/config", delete_config, "config"),
    _r("GET", "/config/*", get_config),
    _r("PUT", "/config/*", put_config, "config"),
    _r("DELETE", "/config/*", delete_config, "config"),
    _r("GET", "/mode", get_mode),
    _r("PUT", "/mode", put_mode, "config"),
    _r("GET", "/mode/*", get_mode),
    _r("PUT", "/mode/*", put_mode, "config"),
    _r("DELETE", "/mode/*", delete_mode, "config"),
)


def match(method: str, path: str) -> tuple[Route, list[str]]:
    """The route for a request and its path arguments; 404 or 405 (Confluent's codes) otherwise."""
    segments = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
    found_path = False
    for route in ROUTES:
        if len(route.pattern) != len(segments):
            continue
        args = []
        for expected, actual in zip(route.pattern, segments):
            if expected == "*":
                args.append(actual)
            elif expected != actual:
                break
        else:
            found_path = True
            if route.method == method:
                return route, args
    if found_path:
        raise errors.bad_request("HTTP 405 Method Not Allowed", 405)
    raise errors.bad_request("HTTP 404 Not Found", 404)
