"""Regex subscriptions of a consumer group: resolved off the request path, cached per group.

Kafka's GroupMetadataManager (maybeUpdateRegularExpressions, refreshRegularExpressions) is the
model. A heartbeat never evaluates a regex: it uses the group's cached resolution and, when that is
missing or stale, asks for a refresh of all the group's regexes at once (a ``RegexRefresh`` in the
outcome, which the runtime runs in the regex worker, `topic_regex.py`). The result comes back as
``resolved``, which bumps the group epoch when a regex's topics changed. A refresh is asked when a
regex has no resolution yet, or when topics were created or deleted since the last one and that one
is at least ``REFRESH_INTERVAL_MS`` old (Kafka batches them the same way); one at a time per group.

The topics are filtered by the Describe permission of the member whose heartbeat asked for the
refresh (Kafka uses that member's request context too), so a regex never reaches a topic that
principal may not see. Until a regex is resolved (a new one, or every one after the coordinator
loaded the group: Kafka persists resolutions, pybroker's record format pin has no such record), a
member keeps the topics of its current target, so a coordinator move revokes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from pybroker.coordinator.consumer_group import ConsumerGroup, ConsumerMember, ResolvedRegex, TopicImage

REFRESH_INTERVAL_MS = 10_000  # Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS

Describable = Callable[[set[str]], set[str]]
"""The topics among those given that a principal may Describe."""


@dataclass(frozen=True, slots=True)
class RegexRefresh:
    """A resolution to run off the loop: every regex of a group against the topics of ``image``."""

    group_id: str
    patterns: frozenset[str]
    image: TopicImage
    describable: Describable | None


def subscribed(group: ConsumerGroup) -> set[str]:
    return {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}


def regex_topics(group: ConsumerGroup, member: ConsumerMember, existing: Iterable[str]) -> set[str]:
    """The existing topics ``member``'s regex stands for: its resolution, or until there is one the
    topics of its current target."""
    regex = member.subscribed_topic_regex
    if not regex:
        return set()
    resolved = group.resolved_regexes.get(regex)
    topics = resolved.topics if resolved is not None else group.target.get(member.member_id, {}).keys()
    return {t for t in topics if t in existing}


def maybe_refresh(group: ConsumerGroup, image: TopicImage, describable: Describable | None,
                  now_ms: int) -> RegexRefresh | None:
    """Forget resolutions no member uses; the refresh to run now, if one is due."""
    patterns = subscribed(group)
    for regex in [r for r in group.resolved_regexes if r not in patterns]:
        del group.resolved_regexes[regex]
    if not patterns or group.regex_refresh_pending:
        return None
    unresolved = any(p not in group.resolved_regexes for p in patterns)
    stale = any(r.image_version != image.version for r in group.resolved_regexes.values()) and \
        now_ms >= group.regex_refreshed_ms + REFRESH_INTERVAL_MS
    if not unresolved and not stale:
        return None
    group.regex_refresh_pending = True
    group.regex_refreshed_ms = now_ms
    return RegexRefresh(group.group_id, frozenset(patterns), image, describable)


def resolved(group: ConsumerGroup, refresh: RegexRefresh, matches: dict[str, list[str]] | None) -> bool:
    """Store a refresh's result (None: it failed and is asked again later); whether any regex still
    subscribed now stands for other topics."""
    group.regex_refresh_pending = False
    if matches is None:
        group.regex_refreshed_ms = 0
        return False
    if refresh.describable is not None:
        allowed = refresh.describable({t for topics in matches.values() for t in topics})
        matches = {regex: [t for t in topics if t in allowed] for regex, topics in matches.items()}
    patterns = subscribed(group)
    changed = False
    for regex, topics in matches.items():
        if regex not in patterns:
            continue
        entry = ResolvedRegex(frozenset(topics), refresh.image.version)
        previous = group.resolved_regexes.get(regex)
        changed = changed or previous is None or previous.topics != entry.topics
        group.resolved_regexes[regex] = entry
    return changed
