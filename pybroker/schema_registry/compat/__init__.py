"""Compatibility levels and the check of a new schema against a subject's earlier versions.

BACKWARD: the new schema reads data written with the earlier one; FORWARD: the earlier reads the new;
FULL: both. The plain levels compare with the latest version, the ``_TRANSITIVE`` ones with every
version. Each type says why one schema cannot read another (``read_errors``); this module adds which
version failed and under which level, as Confluent's verbose messages do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pybroker.schema_registry.types import ParsedSchema

NONE = "NONE"
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"


@dataclass(frozen=True, slots=True)
class Earlier:
    version: int
    schema: ParsedSchema


def check(level: str, new: ParsedSchema, earlier: Sequence[Earlier]) -> list[str]:
    """Why ``new`` breaks ``level`` against ``earlier`` (oldest first); empty when compatible."""
    if level == NONE or not earlier:
        return []
    targets = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
    backward, forward = level.startswith(("BACKWARD", "FULL")), level.startswith(("FORWARD", "FULL"))
    for old in reversed(targets):
        errors: list[str] = []
        try:
            if backward:
                errors += new.read_errors(old.schema)
            if forward:
                errors += old.schema.read_errors(new)
        except RecursionError:
            errors.append("{errorType:'NESTED_TOO_DEEPLY', description:'the schemas are nested too deeply to compare'}")
        if errors:
            return [*errors, f"{{oldSchemaVersion: {old.version}}}", f"{{oldSchema: '{old.schema.canonical()}'}}",
                    f"{{compatibility: '{level}'}}"]
    return []
