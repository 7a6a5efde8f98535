"""The schema registry as the console shows it: subjects with their versions, ids, types and
compatibility, read over the registry's REST API (the console's only HTTP client besides the browser)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from pybroker.client.registry_http import RegistryHttpClient, segment

TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class SubjectRow:
    subject: str
    versions: int
    latest_version: int
    latest_id: int
    schema_type: str
    compatibility: str


async def _get(base: str, path: str) -> Any:
    return await asyncio.to_thread(RegistryHttpClient(base, timeout_s=TIMEOUT_S).call, "GET", path)


async def subjects(base: str) -> tuple[str, list[SubjectRow]]:
    """The global compatibility level and a row per live subject."""
    level = (await _get(base, "/config"))["compatibilityLevel"]
    rows = []
    for subject in await _get(base, "/subjects"):
        name = segment(subject)
        versions = await _get(base, f"/subjects/{name}/versions")
        latest = await _get(base, f"/subjects/{name}/versions/latest")
        config = await _get(base, f"/config/{name}?defaultToGlobal=true")
        rows.append(SubjectRow(subject, len(versions), latest["version"], latest["id"],
                               latest.get("schemaType", "AVRO"), config["compatibilityLevel"]))
    return level, rows


async def subject_versions(base: str, subject: str) -> tuple[str, list[dict[str, Any]]]:
    """The subject's compatibility level and each live version (id, type, schema pretty-printed, references)."""
    name = segment(subject)
    level = (await _get(base, f"/config/{name}?defaultToGlobal=true"))["compatibilityLevel"]
    versions = []
    for number in await _get(base, f"/subjects/{name}/versions"):
        version = await _get(base, f"/subjects/{name}/versions/{number}")
        schema = version["schema"]
        if version.get("schemaType", "AVRO") != "PROTOBUF":
            try:
                schema = json.dumps(json.loads(schema), indent=2)
            except ValueError:
                pass
        versions.append({**version, "schemaType": version.get("schemaType", "AVRO"), "schema": schema,
                         "references": version.get("references", [])})
    return level, versions
