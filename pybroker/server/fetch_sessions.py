"""Incremental fetch sessions (KIP-227): which partitions a Fetch reads and which its response carries.

A fetcher with many partitions opens a session with a full request (session id 0, epoch 0); the
broker remembers the partitions and what it last told the fetcher about each. Later requests name
the session and the next epoch and carry only the partitions that changed (added or updated in
`topics`, dropped in `forgotten_topics_data`); their responses carry only the partitions with
something new. The request metadata means, as in KIP-227:

    id 0,  epoch 0   full request; create a session if the cache has room
    id 0,  epoch -1  full request, no session (also every request before Fetch v7)
    id N,  epoch 0   close session N, then as id 0 epoch 0
    id N,  epoch -1  close session N, full request without a session
    id N,  epoch E   incremental request in session N; E must be the session's next epoch

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions. When it is full a new
session takes the slot of the least recently used one if that has been idle longer than
`min.incremental.fetch.session.eviction.ms`; otherwise, as in Kafka's FetchSessionCache, it may
evict the least valuable evictable session (consumer sessions before follower sessions, then
fewer partitions first): a follower may evict any consumer session and any session older than
the eviction time, a consumer only sessions older than it, and only when its own session would
be worth more. This module is pure: time comes in as `now_ms`, and it never touches the log.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Sequence

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import FetchRequest, FetchResponse

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1

# A topic name (Fetch before v13) or topic id (v13+), and a partition index.
PartitionKey = tuple[str | uuid.UUID, int]
Requested = list[tuple[PartitionKey, FetchRequest.FetchPartition]]


def next_epoch(epoch: int) -> int:
    """The epoch a session expects after `epoch`; it wraps to 1, never back to the full-request 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the fetcher's last request for it and what it was last told."""

    fetch: FetchRequest.FetchPartition
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self, data: FetchResponse.PartitionData, records_size: int) -> bool:
        """Whether an incremental response carries this partition; remembers what it now tells.

        Kafka's rule (new records, a moved high watermark or log start offset, an error, a preferred
        read replica or diverging epoch), plus a moved last stable offset for read_committed fetchers.
        """
        changed = (records_size > 0 or data.error_code != ErrorCode.NONE
                   or data.high_watermark != self.high_watermark
                   or data.last_stable_offset != self.last_stable_offset
                   or data.log_start_offset != self.log_start_offset
                   or data.preferred_read_replica >= 0 or data.diverging_epoch.epoch >= 0)
        # After an error the cached watermark is unknown, so the partition is sent again once it clears.
        self.high_watermark = -1 if data.error_code != ErrorCode.NONE else data.high_watermark
        self.last_stable_offset = data.last_stable_offset
        self.log_start_offset = data.log_start_offset
        return changed


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # opened by a follower
    uses_topic_ids: bool  # opened with Fetch v13+, so partitions are keyed by topic id
    partitions: dict[PartitionKey, CachedPartition]  # in fetch order
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental request must carry
    # Set on every use, as Kafka decides evictability when a session is touched, not when it is needed.
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    def update(self, requested: Requested, forgotten: Sequence[PartitionKey]) -> None:
        """Apply an incremental request: new partitions join at the end, known ones take the new offsets."""
        for key, fetch in requested:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(fetch)
            else:
                cached.fetch = fetch
        for key in forgotten:
            self.partitions.pop(key, None)

    def eviction_rank(self) -> tuple[bool, int]:
        """Eviction order: consumer sessions go before follower sessions, then smaller before larger."""
        return self.privileged, len(self.partitions)


class FetchContext:
    """How one Fetch is served: the partitions to read, in order, and how its response is shaped.

    A plain class, not a dataclass: compiled, mypyc builds a dataclass through the dataclasses module's
    interpreted ``__init__`` (about 3,000 instructions per Fetch here, against a native constructor's few)."""

    __slots__ = ("partitions", "error", "session", "create_session", "privileged", "uses_topic_ids",
                 "keeps_session")

    def __init__(self, partitions: Requested, error: ErrorCode = ErrorCode.NONE, session: FetchSession | None = None,
                 create_session: bool = False, privileged: bool = False, uses_topic_ids: bool = False) -> None:
        self.partitions = partitions
        self.error = error
        self.session = session  # the session of an incremental request
        self.create_session = create_session  # a full request with epoch 0
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        # The response is shaped by a session, or may open one; otherwise (no session, epoch -1, as every
        # librdkafka fetch) it carries every partition read and session id 0, with nothing to remember.
        self.keeps_session = session is not None or create_session


@dataclass
class FetchSessionCache:
    max_slots: int = 1000
    eviction_ms: int = 120000
    rng: random.Random = field(default_factory=random.Random)
    sessions: dict[int, FetchSession] = field(default_factory=dict)

    def new_context(self, now_ms: int, session_id: int, epoch: int, privileged: bool, uses_topic_ids: bool,
                    requested: Requested, forgotten: Sequence[PartitionKey]) -> FetchContext:
        """Decide from a request's session id and epoch what it reads (KIP-227's table above). (Arguments may be
        passed by position: the Fetch handler does, as a keyword call to compiled code parses its names.)"""
        if epoch == FINAL_EPOCH or epoch == INITIAL_EPOCH:
            if self.sessions:
                self.sessions.pop(session_id, None)
            return FetchContext(requested, ErrorCode.NONE, None, epoch == INITIAL_EPOCH, privileged, uses_topic_ids)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext([], ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(requested, forgotten)
        if not session.partitions:  # everything forgotten: the session ends
            del self.sessions[session.id]
            return FetchContext([])
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext([(key, cached.fetch) for key, cached in session.partitions.items()], session=session)

    def complete(self, context: FetchContext, now_ms: int,
                 outcomes: Sequence[tuple[PartitionKey, FetchResponse.PartitionData, int]]) -> tuple[int, list[bool]]:
        """The response's session id, and for each (key, data, records size) read whether it is sent.

        A full response sends every partition (and may open a session remembering them); an
        incremental one only those with something new, and moves partitions that returned records
        to the end of the session, so the next fetch starts with the others.
        """
        session = context.session
        if session is None:
            session_id = self._maybe_create(context, now_ms, outcomes) if context.create_session else 0
            return session_id, [True] * len(outcomes)
        included = []
        for key, data, records_size in outcomes:
            cached = session.partitions.get(key)
            included.append(cached is None or cached.must_respond(data, records_size))
            if cached is not None and records_size > 0:
                del session.partitions[key]
                session.partitions[key] = cached
        return session.id, included

    def _maybe_create(self, context: FetchContext, now_ms: int,
                      outcomes: Sequence[tuple[PartitionKey, FetchResponse.PartitionData, int]]) -> int:
        if len(self.sessions) >= self.max_slots and not self._evict_for(context.privileged, len(outcomes), now_ms):
            return INVALID_SESSION_ID
        fetches = dict(context.partitions)
        partitions = {key: CachedPartition(fetches[key], data.high_watermark, data.last_stable_offset,
                                           data.log_start_offset) for key, data, _ in outcomes}
        session = FetchSession(self._new_id(), context.privileged, context.uses_topic_ids, partitions,
                               created_ms=now_ms, last_used_ms=now_ms)
        self.sessions[session.id] = session
        self._touch(session, now_ms)
        return session.id

    def _evict_for(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Free a slot for a new session of this kind and size, if the eviction rules allow it."""
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            del self.sessions[stalest.id]
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (*s.eviction_rank(), s.id))
        if (privileged, size) <= victim.eviction_rank():
            return False
        del self.sessions[victim.id]
        return True

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        old = now_ms - session.created_ms > self.eviction_ms
        session.evictable_by_all = old
        session.evictable_by_privileged = old or not session.privileged

    def _new_id(self) -> int:
        while True:
            session_id = self.rng.randint(1, INT32_MAX)
            if session_id not in self.sessions:
                return session_id
