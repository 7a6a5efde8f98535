"""The records of the ``_schemas`` topic in Confluent's format, so another registry reading the same
topic (Confluent's, Karapace) sees the same subjects, ids and configs.

Keys are JSON with a fixed field order (compaction keeps the last record per key *bytes*):
``{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}``, ``{"keytype":"CONFIG","subject":null,"magic":0}``,
``{"keytype":"MODE",...}``, ``{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}``,
``{"keytype":"CLEAR_SUBJECT",...}`` and ``{"keytype":"NOOP","magic":0}``. A null value deletes the key.

One key of pybroker's own keeps ids from being reused: ``{"keytype":"NOOP","magic":1}`` (a NOOP to any
other reader) holds ``{"maxId": n}``, written when a hard delete removes the schema with the highest id,
so that compaction dropping that schema's record cannot lower the next id handed out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, overload

SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP = \
    "SCHEMA", "CONFIG", "MODE", "DELETE_SUBJECT", "CLEAR_SUBJECT", "NOOP"
KEY_TYPES = frozenset({SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP})
ID_WATERMARK_MAGIC = 1


@dataclass(frozen=True, slots=True)
class Key:
    keytype: str
    subject: str | None = None
    version: int | None = None
    magic: int = 0

    def encode(self) -> bytes:
        if self.keytype == SCHEMA:
            document: dict[str, Any] = {"keytype": SCHEMA, "subject": self.subject, "version": self.version,
                                        "magic": 1}
        elif self.keytype == NOOP:
            document = {"keytype": NOOP, "magic": self.magic}
        else:
            document = {"keytype": self.keytype, "subject": self.subject, "magic": 0}
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def schema_key(subject: str, version: int) -> Key:
    return Key(SCHEMA, subject, version, 1)


NOOP_KEY = Key(NOOP)
ID_WATERMARK_KEY = Key(NOOP, magic=ID_WATERMARK_MAGIC)


@overload
def encode_value(value: dict[str, Any]) -> bytes: ...
@overload
def encode_value(value: None) -> None: ...
def encode_value(value: dict[str, Any] | None) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def decode(key: bytes | None, value: bytes | None) -> tuple[Key, dict[str, Any] | None] | None:
    """A record of the topic, or None for one that is not the registry's (skipped, as Confluent's reader does)."""
    if key is None:
        return None
    try:
        document = json.loads(key)
        parsed_value = json.loads(value) if value is not None else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(document, dict) or document.get("keytype") not in KEY_TYPES:
        return None
    if parsed_value is not None and not isinstance(parsed_value, dict):
        return None
    version = document.get("version")
    subject = document.get("subject")
    return Key(document["keytype"], subject if isinstance(subject, str) else None,
               version if isinstance(version, int) else None, document.get("magic", 0)), parsed_value
