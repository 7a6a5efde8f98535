"""A ShareFetch carrying acknowledgements fetches while their writes are under way, as Kafka's
KafkaApis.handleShareFetchRequest does: the acknowledgements are applied first (SharePartitionManager.acknowledge
changes the in-memory state at once), the fetch is started without waiting for their writes to the share
coordinator (handleFetchFromShareFetchRequest), and the answer is sent once both are done (thenCombine; KAFKA-19227:
"the piggybacked share fetch-acknowledgement calls from KafkaApis are async and later the response is combined").
Before, pybroker started fetching only once the writes were done, so a slow share coordinator held back the
records of every other partition of the fetch, and the fetch's wait began only after the writes.

The set-up of ``test_share_loads_at_once``: the topic is led by L, share-partition A's state is kept by broker C,
which is stopped (SIGSTOP), so the write of an acknowledgement of A's records waits; B's state is kept by D.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ShareFetchRequest, ShareFetchResponse
from tests.cluster.test_share_loads_at_once import (
    ACCEPT,
    EXTRA,
    GROUP,
    TOPIC,
    Setup,
    _produce,
    _setup,
    _share_acknowledge,
    _share_fetch,
)
from tests.cluster.test_share_failover import _broker
from tests.integration.test_share_metrics import scraped_once, value

ACQUIRED = "pybroker_share_records_acquired_total"


def test_a_fetch_acquires_while_its_acknowledgements_are_written(tmp_path: Path) -> None:
    """m1 holds A's two records, B's first three are accepted. With C stopped, m1's ShareFetch accepts A's records
    (a write that waits for C) and waits for records; three records produced to B meanwhile are acquired by that
    fetch (L's count of B's acquired records reaches 6) while A's write still waits, and the answer, once C runs
    again, carries both: A's acknowledgement written, B's records 3-5. Before, the fetch did not start while the
    write waited: nothing more was acquired from B until C ran again."""
    extra = {**EXTRA, "zookeeper.session.timeout.ms": "30000"}  # C stays registered while it is stopped
    with _setup(tmp_path, extra) as setup:
        _produce(setup.client, setup.a, 2)
        assert _share_fetch(setup, 0, [setup.b], max_wait_ms=15_000) == {setup.b: (ErrorCode.NONE, [(0, 2, 1)])}
        assert _share_fetch(setup, 1, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 1, 1)])}
        assert _share_acknowledge(setup, 2, {setup.b: (0, 2)}) == {setup.b: ErrorCode.NONE}
        leader = _leader(setup)
        producer = _broker(setup.cluster, leader)
        with ThreadPoolExecutor(1) as pool:
            os.kill(setup.stopped, signal.SIGSTOP)
            try:
                answer = pool.submit(_fetch_accepting_a, setup, 3)
                _produce(producer, setup.b, 3)
                scraped_once(setup.cluster.brokers[leader], lambda samples: value(
                    samples, ACQUIRED, group=GROUP, topic=TOPIC, partition=str(setup.b)) == 6,
                    "B's new records acquired by the fetch while A's write waits for C")
                assert not answer.done()  # answered only once A's write is done
            finally:
                os.kill(setup.stopped, signal.SIGCONT)
            assert answer.result() == {setup.a: (ErrorCode.NONE, ErrorCode.NONE, []),
                                       setup.b: (ErrorCode.NONE, ErrorCode.NONE, [(3, 5, 1)])}
        producer.close()


def _leader(setup: Setup) -> int:
    """L's broker id: the one the test's client talks to."""
    port = setup.client.sock.getpeername()[1]
    return next(i for i, broker in enumerate(setup.cluster.brokers) if broker.port == port)


def _fetch_accepting_a(setup: Setup, epoch: int) -> dict[int, tuple[ErrorCode, ErrorCode, list[tuple[int, int, int]]]]:
    """m1's ShareFetch accepting A's records 0-1 and waiting up to 30 s for records: per partition, its error, its
    acknowledgement's error and the records acquired."""
    R = ShareFetchRequest
    answer = setup.client.request(R(
        group_id=GROUP, member_id="m1", share_session_epoch=epoch, max_wait_ms=30_000, min_bytes=1, max_records=100,
        topics=[R.FetchTopic(topic_id=setup.topic_id, partitions=[
            R.FetchPartition(partition_index=setup.a, acknowledgement_batches=[
                R.AcknowledgementBatch(first_offset=0, last_offset=1, acknowledge_types=[ACCEPT])])])]),
        1, ShareFetchResponse)
    assert answer.error_code == ErrorCode.NONE, answer
    return {p.partition_index: (ErrorCode(p.error_code), ErrorCode(p.acknowledge_error_code),
                                [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records])
            for t in answer.responses for p in t.partitions}
