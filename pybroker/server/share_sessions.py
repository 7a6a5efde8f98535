"""Share sessions (KIP-932): which share-partitions a share consumer fetches from this broker, by epoch.

A share session is keyed by (group, member): ShareFetch with epoch 0 opens it (replacing one the member had) with the
partitions it names, later requests carry the next epoch and only the partitions added (``topics``) or dropped
(``forgotten_topics_data``); epoch -1 closes it (ShareFetch or ShareAcknowledge), after which the member's acquired
records on this broker are released. A request whose epoch is not the session's next one is answered
INVALID_SHARE_SESSION_EPOCH, one naming a session this broker does not hold SHARE_SESSION_NOT_FOUND, and a new
session beyond ``group.share.max.share.sessions`` SHARE_SESSION_LIMIT_REACHED. A session unused for longer than its
group's member session timeout is dropped (its consumer is gone). Pure: time comes in as ``now_ms``, no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from pybroker.protocol.error_codes import ErrorCode

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "SessionContext", "ShareSession", "ShareSessionCache"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1

SharePartitionKey = tuple[uuid.UUID, int]


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: dict[SharePartitionKey, None] = field(default_factory=dict)
    """The session's partitions, in the order they were added (a dict as an ordered set)."""
    last_used_ms: int = 0


@dataclass(slots=True)
class SessionContext:
    """What a request may do: its session (None when closed by it), whether it is a full request, or the error."""

    error: ErrorCode = ErrorCode.NONE
    session: ShareSession | None = None
    full: bool = False
    closing: bool = False


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def fetch_context(self, group_id: str, member_id: str, epoch: int, added: Iterable[SharePartitionKey],
                      forgotten: Iterable[SharePartitionKey], now_ms: int) -> SessionContext:
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                return SessionContext(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = self.sessions[key] = ShareSession(group_id, member_id, last_used_ms=now_ms)
            session.partitions.update(dict.fromkeys(added))
            return SessionContext(session=session, full=True)
        context = self._continue(key, epoch, now_ms)
        if context.session is not None:
            for partition in forgotten:
                context.session.partitions.pop(partition, None)
            context.session.partitions.update(dict.fromkeys(added))
        return context

    def acknowledge_context(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> SessionContext:
        """ShareAcknowledge: it may continue or close a session, never open one."""
        if epoch == INITIAL_EPOCH:
            return SessionContext(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        return self._continue((group_id, member_id), epoch, now_ms)

    def remove(self, group_id: str, member_id: str, session: ShareSession | None = None) -> None:
        """Remove the member's session; with ``session``, only if it is still that one (not one opened since)."""
        key = (group_id, member_id)
        if session is None or self.sessions.get(key) is session:
            self.sessions.pop(key, None)

    def idle(self, now_ms: int, idle_ms: Callable[[str], int]) -> list[ShareSession]:
        """Remove and return the sessions unused for longer than ``idle_ms(group)`` (the group's member session
        timeout): a consumer gone without closing its session, whose member this broker may not coordinate."""
        gone = [s for s in self.sessions.values() if now_ms - s.last_used_ms > idle_ms(s.group_id)]
        for session in gone:
            del self.sessions[(session.group_id, session.member_id)]
        return gone

    def _continue(self, key: tuple[str, str], epoch: int, now_ms: int) -> SessionContext:
        session = self.sessions.get(key)
        if session is None:
            return SessionContext(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            del self.sessions[key]
            return SessionContext(session=session, closing=True)
        if epoch != session.next_epoch:
            return SessionContext(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session.next_epoch = 1 if epoch == INT32_MAX else epoch + 1
        session.last_used_ms = now_ms
        return SessionContext(session=session)
