"""Share sessions (KIP-932): epochs as fetch sessions, the session limit, and closing."""

from __future__ import annotations

import uuid

from pybroker.protocol.error_codes import ErrorCode
from pybroker.server.share_sessions import ShareSessionCache

T = uuid.uuid4()


def test_epochs_follow_one_another_and_a_stale_one_is_refused() -> None:
    cache = ShareSessionCache(10)
    opened = cache.fetch_context("g", "m", 0, [(T, 0), (T, 1)], [])
    assert opened.full and list(opened.session.partitions) == [(T, 0), (T, 1)]
    assert cache.fetch_context("g", "m", 1, [(T, 2)], [(T, 0)]).error is ErrorCode.NONE
    assert list(cache.sessions[("g", "m")].partitions) == [(T, 1), (T, 2)]
    assert cache.fetch_context("g", "m", 1, [], []).error is ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge_context("g", "m", 2).error is ErrorCode.NONE
    assert cache.acknowledge_context("g", "m", 0).error is ErrorCode.INVALID_SHARE_SESSION_EPOCH
    closed = cache.acknowledge_context("g", "m", -1)
    assert closed.closing and ("g", "m") not in cache.sessions
    assert cache.fetch_context("g", "m", 4, [], []).error is ErrorCode.SHARE_SESSION_NOT_FOUND


def test_the_session_limit() -> None:
    cache = ShareSessionCache(1)
    cache.fetch_context("g", "a", 0, [], [])
    assert cache.fetch_context("g", "b", 0, [], []).error is ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert cache.fetch_context("g", "a", 0, [], []).error is ErrorCode.NONE  # reopening its own session
