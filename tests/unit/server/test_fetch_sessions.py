"""The fetch session cache (KIP-227): session lifecycle, epochs, eviction and the incremental response filter."""

from __future__ import annotations

import random

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.server.fetch_sessions import (FINAL_EPOCH, INT32_MAX, FetchContext, FetchSessionCache, PartitionKey,
                                            Requested, next_epoch)

A0: PartitionKey = ("a", 0)
A1: PartitionKey = ("a", 1)
B0: PartitionKey = ("b", 0)


def fetch(key: PartitionKey, offset: int = 0) -> tuple[PartitionKey, FetchRequest.FetchPartition]:
    return key, FetchRequest.FetchPartition(partition=key[1], fetch_offset=offset, partition_max_bytes=1024)


def data(high_watermark: int = 10, records: int = 0, error: ErrorCode = ErrorCode.NONE
         ) -> tuple[FetchResponse.PartitionData, int]:
    return FetchResponse.PartitionData(error_code=error, high_watermark=high_watermark,
                                       last_stable_offset=high_watermark, log_start_offset=0), records


def open_session(cache: FetchSessionCache, requested: Requested, now_ms: int = 0, privileged: bool = False) -> int:
    """A full request with epoch 0 that reads nothing new and leaves each partition at watermark 10."""
    context = cache.new_context(now_ms, session_id=0, epoch=0, privileged=privileged, uses_topic_ids=False,
                                requested=requested, forgotten=[])
    session_id, included = cache.complete(context, now_ms, [(key, *data()) for key, _ in requested])
    assert all(included)
    return session_id


def incremental(cache: FetchSessionCache, session_id: int, epoch: int, requested: Requested | None = None,
                forgotten: list[PartitionKey] | None = None, now_ms: int = 0) -> FetchContext:
    return cache.new_context(now_ms, session_id=session_id, epoch=epoch, privileged=False, uses_topic_ids=False,
                             requested=requested or [], forgotten=forgotten or [])


def test_full_request_with_epoch_0_creates_a_session_that_reads_its_partitions():
    cache = FetchSessionCache(rng=random.Random(1))
    session_id = open_session(cache, [fetch(A0, 5), fetch(A1, 7)])
    assert 0 < session_id <= INT32_MAX
    context = incremental(cache, session_id, 1)
    assert context.error is ErrorCode.NONE
    assert [(key, f.fetch_offset) for key, f in context.partitions] == [(A0, 5), (A1, 7)]


def test_incremental_request_adds_updates_and_forgets_partitions():
    cache = FetchSessionCache()
    session_id = open_session(cache, [fetch(A0), fetch(A1)])
    context = incremental(cache, session_id, 1, requested=[fetch(A1, 3), fetch(B0, 9)], forgotten=[A0])
    assert [(key, f.fetch_offset) for key, f in context.partitions] == [(A1, 3), (B0, 9)]


def test_forgetting_every_partition_ends_the_session():
    cache = FetchSessionCache()
    session_id = open_session(cache, [fetch(A0)])
    context = incremental(cache, session_id, 1, forgotten=[A0])
    assert context.session is None and context.partitions == []
    assert incremental(cache, session_id, 2).error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_wrong_epoch_is_refused_and_the_session_keeps_its_expected_epoch():
    cache = FetchSessionCache()
    session_id = open_session(cache, [fetch(A0)])
    assert incremental(cache, session_id, 2).error is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert incremental(cache, session_id, 1).error is ErrorCode.NONE
    assert incremental(cache, session_id, 1).error is ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_unknown_session_id_is_not_found():
    cache = FetchSessionCache()
    assert incremental(cache, 12345, 1).error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_topic_id_usage_must_match_the_session():
    cache = FetchSessionCache()
    session_id = open_session(cache, [fetch(A0)])
    context = cache.new_context(0, session_id=session_id, epoch=1, privileged=False, uses_topic_ids=True,
                                requested=[], forgotten=[])
    assert context.error is ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_final_epoch_closes_the_session_and_serves_the_request_sessionless():
    cache = FetchSessionCache()
    session_id = open_session(cache, [fetch(A0)])
    context = cache.new_context(0, session_id=session_id, epoch=FINAL_EPOCH, privileged=False,
                                uses_topic_ids=False, requested=[fetch(B0)], forgotten=[])
    assert cache.complete(context, 0, [(B0, *data())]) == (0, [True])
    assert cache.sessions == {}


def test_epoch_wraps_to_1_after_int32_max():
    assert next_epoch(0) == 1
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_incremental_response_carries_only_partitions_with_something_new():
    cache = FetchSessionCache()
    session_id = open_session(cache, [fetch(A0), fetch(A1), fetch(B0)])
    context = incremental(cache, session_id, 1)
    outcomes = [(A0, *data()), (A1, *data(high_watermark=11)), (B0, *data(records=100))]
    assert cache.complete(context, 0, outcomes) == (session_id, [False, True, True])
    # What was just sent is not sent again; the partition that returned records now reads last.
    context = incremental(cache, session_id, 2)
    assert [key for key, _ in context.partitions] == [A0, A1, B0]
    assert cache.complete(context, 0, [(A0, *data()), (A1, *data(11)), (B0, *data())]) == (session_id, [False] * 3)


def test_partition_in_error_is_sent_each_time_and_again_once_it_clears():
    cache = FetchSessionCache()
    session_id = open_session(cache, [fetch(A0)])
    failing = data(error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert cache.complete(incremental(cache, session_id, 1), 0, [(A0, *failing)])[1] == [True]
    assert cache.complete(incremental(cache, session_id, 2), 0, [(A0, *failing)])[1] == [True]
    assert cache.complete(incremental(cache, session_id, 3), 0, [(A0, *data())])[1] == [True]


def test_partition_added_incrementally_is_sent_at_least_once():
    cache = FetchSessionCache()
    session_id = open_session(cache, [fetch(A0)])
    context = incremental(cache, session_id, 1, requested=[fetch(B0)])
    assert cache.complete(context, 0, [(A0, *data()), (B0, *data())])[1] == [False, True]


def test_full_cache_creates_no_session_until_one_has_idled_past_the_eviction_time():
    cache = FetchSessionCache(max_slots=1, eviction_ms=1000)
    first = open_session(cache, [fetch(A0)], now_ms=0)
    assert open_session(cache, [fetch(A0)], now_ms=1000) == 0
    second = open_session(cache, [fetch(A0)], now_ms=1001)
    assert second != 0 and list(cache.sessions) == [second]
    assert incremental(cache, first, 1, now_ms=1001).error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_follower_session_may_evict_a_recent_consumer_session_but_not_the_reverse():
    cache = FetchSessionCache(max_slots=1, eviction_ms=1000)
    consumer = open_session(cache, [fetch(A0)], now_ms=0)
    follower = open_session(cache, [fetch(A0)], now_ms=10, privileged=True)
    assert follower != 0 and consumer not in cache.sessions
    assert open_session(cache, [fetch(A0), fetch(A1)], now_ms=20) == 0


def test_old_busy_session_is_evicted_only_for_a_session_with_more_partitions():
    cache = FetchSessionCache(max_slots=1, eviction_ms=1000)
    session_id = open_session(cache, [fetch(A0), fetch(A1)], now_ms=0)
    incremental(cache, session_id, 1, now_ms=1500)  # in use, and now older than the eviction time
    assert open_session(cache, [fetch(B0), fetch(A0)], now_ms=1600) == 0
    assert open_session(cache, [fetch(B0), fetch(A0), fetch(A1)], now_ms=1600) != 0
    assert session_id not in cache.sessions


def test_zero_slots_serves_every_fetch_sessionless():
    cache = FetchSessionCache(max_slots=0)
    assert open_session(cache, [fetch(A0)]) == 0
