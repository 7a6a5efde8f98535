"""KIP-848 topic regexes, run as Kafka runs them: RE2 (Kafka uses RE2/J), in linear time, whole names.

What a regex may contain is RE2's syntax, the one RE2/J accepts: no backreferences, lookarounds,
atomic groups or possessive quantifiers (constructs that need backtracking), counted repetitions up
to 1000, a compiled program within RE2's default memory budget. pybroker adds one bound Kafka does
not have: at most ``MAX_REGEX_LENGTH`` characters, because RE2's compiler holds the interpreter lock
and a long pattern of counted repetitions takes it for a tenth of a second or more.

Compiling and matching run in a child process (``RegexEngine``; ``python -m
pybroker.coordinator.topic_regex`` is the child): RE2's Python binding holds the interpreter lock
for each call, so in a thread of the broker a large topic set, or a pattern costly to compile, would
still stall the event loop. The child answers one JSON line per JSON line read and exits when its
input closes, so it never outlives the broker. It starts with the first regex a member sends; one
that kills it, or keeps it busy longer than ``CHECK_TIMEOUT_S``, is refused as invalid and the child
is started again.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import sys
from typing import Any, Iterable, Sequence

log = logging.getLogger("pybroker.coordinator")

MAX_REGEX_LENGTH = 4096
KNOWN_VALID = 1024
"""Regexes remembered as valid (the most recent), so a member's heartbeats do not compile theirs again."""
CHECK_TIMEOUT_S = 10.0
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def _compile(pattern: str) -> object:
    import re2

    options = re2.Options()
    options.log_errors = False  # a refused pattern is answered to its sender, not printed on stderr
    return re2.compile(pattern, options)


def invalid_reason(pattern: str) -> str | None:
    """Why RE2 refuses ``pattern`` (the text of Kafka's INVALID_REGULAR_EXPRESSION message), or None."""
    if len(pattern) > MAX_REGEX_LENGTH:
        return f"longer than {MAX_REGEX_LENGTH} characters"
    import re2

    try:
        _compile(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else str(exc)
        return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
    except UnicodeError:
        return "not valid UTF-8"
    return None


def resolve(patterns: Sequence[str], topics: Sequence[str]) -> dict[str, list[str]]:
    """The topics each pattern matches whole (internal topics never); run in the child."""
    compiled = {pattern: _compile(pattern) for pattern in patterns}
    return {pattern: [t for t in topics if t not in INTERNAL_TOPICS and regex.fullmatch(t)]  # type: ignore[attr-defined]
            for pattern, regex in compiled.items()}


def invalid_message(pattern: str, reason: str) -> str:
    """Kafka's message (GroupMetadataManager.throwIfRegularExpressionIsInvalid)."""
    return f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {reason}."


class RegexEngine:
    """The broker's regex child process and the regexes it has already found valid."""

    def __init__(self) -> None:
        self._child: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()  # one question at a time on the child's pipes
        self._valid: collections.OrderedDict[str, None] = collections.OrderedDict()

    async def _ask(self, question: dict[str, Any], timeout: float | None) -> Any:
        """The child's answer; a child that died or did not answer in time is killed (the next
        question starts another) and OSError raised."""
        async with self._lock:
            child = self._child
            if child is None or child.returncode is not None:
                child = self._child = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "pybroker.coordinator.topic_regex", stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, limit=2**30)
            assert child.stdin is not None and child.stdout is not None
            try:
                child.stdin.write(json.dumps(question).encode() + b"\n")
                line = await asyncio.wait_for(child.stdout.readline(), timeout)
                if not line:
                    raise OSError("the regex process exited")
                return json.loads(line)
            except (OSError, asyncio.TimeoutError, ValueError) as exc:
                self._stop()
                raise OSError(f"the regex process failed: {exc or type(exc).__name__}") from None

    async def invalid_reason(self, pattern: str) -> str | None:
        """``invalid_reason`` of the pattern, compiled in the child unless it was found valid lately."""
        if pattern in self._valid:
            self._valid.move_to_end(pattern)
            return None
        if len(pattern) > MAX_REGEX_LENGTH:
            return invalid_reason(pattern)
        try:
            reason: str | None = await self._ask({"check": pattern}, CHECK_TIMEOUT_S)
        except OSError as exc:
            log.warning("Refused a member's regex of %d characters: %s", len(pattern), exc)
            return "the regular expression engine failed on it"
        if reason is None:
            self._valid[pattern] = None
            if len(self._valid) > KNOWN_VALID:
                self._valid.popitem(last=False)
        return reason

    async def resolve(self, patterns: Iterable[str], topics: Iterable[str]) -> dict[str, list[str]]:
        return await self._ask({"resolve": sorted(patterns), "topics": list(topics)}, None)

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.returncode is None:
            child.kill()

    def shutdown(self) -> None:
        self._stop()


def _serve() -> None:
    """The child: one JSON answer per JSON question until stdin closes."""
    for line in sys.stdin.buffer:
        question = json.loads(line)
        if "check" in question:
            answer: Any = invalid_reason(question["check"])
        else:
            answer = resolve(question["resolve"], question["topics"])
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
