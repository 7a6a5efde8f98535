"""What the admin tools share beyond :mod:`pybroker.client.command_line`: repeatable ``key=value`` options
and Kafka's topic include-lists."""

from __future__ import annotations

import re
from typing import Sequence

from pybroker.client.command_line import CommandError, UsageError
from pybroker.common.topic import INTERNAL_TOPICS


def parse_key_values(items: Sequence[str], option: str) -> dict[str, str]:
    """`key=value` items of a repeatable option (`--property`); UsageError naming a malformed one."""
    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"Invalid {option} {item!r}: expected key=value")
        parsed[key.strip()] = value
    return parsed


def topic_filter(pattern: str | None, exclude_internal: bool, names: Sequence[str]) -> list[str]:
    """Kafka's topic include-list: a regex over whole names, ',' meaning '|', quotes and spaces dropped."""
    regex = None
    if pattern is not None:
        cleaned = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", pattern.strip().replace(",", "|").replace(" ", "")))
        try:
            regex = re.compile(cleaned)
        except re.error:
            raise CommandError(f"{cleaned} is an invalid regex.") from None
    return [n for n in names
            if (regex is None or regex.fullmatch(n)) and not (exclude_internal and n in INTERNAL_TOPICS)]
