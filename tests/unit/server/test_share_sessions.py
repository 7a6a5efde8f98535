"""Share sessions (KIP-932): epochs as fetch sessions, the session limit, and closing."""

from __future__ import annotations

import uuid

from pybroker.protocol.error_codes import ErrorCode
from pybroker.server.share_sessions import ShareSessionCache

T = uuid.uuid4()


def test_epochs_follow_one_another_and_a_stale_one_is_refused() -> None:
    cache = ShareSessionCache(10)
    opened = cache.fetch_context("g", "m", 0, [(T, 0), (T, 1)], [], 0)
    assert opened.full and list(opened.session.partitions) == [(T, 0), (T, 1)]
    assert cache.fetch_context("g", "m", 1, [(T, 2)], [(T, 0)], 0).error is ErrorCode.NONE
    assert list(cache.sessions[("g", "m")].partitions) == [(T, 1), (T, 2)]
    assert cache.fetch_context("g", "m", 1, [], [], 0).error is ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge_context("g", "m", 2, 0).error is ErrorCode.NONE
    assert cache.acknowledge_context("g", "m", 0, 0).error is ErrorCode.INVALID_SHARE_SESSION_EPOCH
    closed = cache.acknowledge_context("g", "m", -1, 0)
    assert closed.closing and ("g", "m") not in cache.sessions
    assert cache.fetch_context("g", "m", 4, [], [], 0).error is ErrorCode.SHARE_SESSION_NOT_FOUND


def test_the_session_limit() -> None:
    cache = ShareSessionCache(1)
    cache.fetch_context("g", "a", 0, [], [], 0)
    assert cache.fetch_context("g", "b", 0, [], [], 0).error is ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert cache.fetch_context("g", "a", 0, [], [], 0).error is ErrorCode.NONE  # reopening its own session


def test_an_idle_session_is_dropped_after_the_group_session_timeout() -> None:
    cache = ShareSessionCache(10)
    cache.fetch_context("g", "a", 0, [], [], 0)
    cache.fetch_context("g", "b", 0, [], [], 0)
    cache.fetch_context("g", "b", 1, [], [], 40_000)
    assert cache.idle(45_000, lambda group: 45_000) == []
    assert [s.member_id for s in cache.idle(45_001, lambda group: 45_000)] == ["a"]
    assert cache.fetch_context("g", "a", 1, [], [], 45_001).error is ErrorCode.SHARE_SESSION_NOT_FOUND


def test_removing_a_closed_session_leaves_one_opened_since() -> None:
    """The end of a request that closed a session (its acknowledgements written) removes that session only: the
    member may have opened a new one while the write waited."""
    cache = ShareSessionCache(10)
    cache.fetch_context("g", "m", 0, [(T, 0)], [], 0)
    closed = cache.acknowledge_context("g", "m", -1, 0)
    assert closed.closing and closed.session is not None
    reopened = cache.fetch_context("g", "m", 0, [(T, 0)], [], 0).session
    cache.remove("g", "m", closed.session)
    assert cache.sessions[("g", "m")] is reopened
    cache.remove("g", "m", reopened)
    assert ("g", "m") not in cache.sessions
