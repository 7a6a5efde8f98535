"""Records archived when their acquisition lock runs out at the delivery count limit leave the share-partition's
in-flight window once the write of that state ends, whether the share coordinator took it or not, as in Kafka:
SharePartition's lock-timeout handler changes the records' state at once (tryUpdateBatchState, no transition to roll
back), writes it, and in the write's whenComplete moves the start offset ("Even if write share group state RPC call
fails, we will still go ahead with the state transition"). Before, pybroker held them in the window (start offset,
in-flight count, the record-lock cap) until a write was taken, so while the share coordinator was unreachable they
counted as in flight. pybroker goes on writing the state until one write is taken (Kafka waits for the next
acknowledgement's write), so the coordinator has the start offset past them once it is back.

The set-up of ``test_share_loads_at_once``: the topic is led by L, share-partition A's state is kept by broker C,
which is stopped (SIGSTOP) while the archiving is written; the persister gives up on C after 3 s.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
)
from tests.cluster.test_share_ack_disconnect import _state_at_c
from tests.cluster.test_share_fetch_while_acks_written import _leader
from tests.cluster.test_share_loads_at_once import EXTRA, GROUP, TOPIC, Setup, _produce, _setup, _share_fetch
from tests.eventually import eventually
from tests.integration.test_share_metrics import scrape, scraped_once, value

EXPIRING = {**EXTRA, "zookeeper.session.timeout.ms": "30000",  # C stays registered while it is stopped
            "share.coordinator.write.timeout.ms": "3000", "group.share.delivery.count.limit": "2",
            "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "1000"}
IN_FLIGHT = "kafka_server_sharepartitionmetrics_inflightmessagecount"
TIMED_OUT = "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total"
RENEW = 4


def test_records_archived_by_a_lock_timeout_leave_the_window_when_the_write_fails(tmp_path: Path) -> None:
    """m1 acquires A's two records twice (the first lock runs out: delivered again); with C stopped the second lock
    runs out too, archiving them at the limit of 2, and L's write of that fails (C does not answer). L's in-flight
    count of A goes down all the same (it stayed up before, until C ran again).

    Once C runs, C has the start offset 2 from a write made after that failure, as pybroker writes again until a
    write is taken: records 2-3, acquired by m1 while the failing write was under way and kept under their lock by
    RENEWs (which write nothing), are stored (available, count 0, as an acquisition is stored) by no other write.
    The failed write itself was built before them; it sits in C's socket while C is stopped and C takes it once it
    runs again, so a start offset of 2 alone would not show that any write came after it."""
    with _setup(tmp_path, EXPIRING) as setup:
        _produce(setup.client, setup.a, 2)
        assert _share_fetch(setup, 0, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 1, 1)])}
        # the lock runs out, its write is taken: the records are delivered again, to this waiting fetch
        assert _share_fetch(setup, 1, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 1, 2)])}
        _produce(setup.client, setup.a, 2)
        leader = setup.cluster.brokers[_leader(setup)]
        partition = {"group": GROUP, "topic": TOPIC, "partition": str(setup.a)}
        assert value(scrape(leader), IN_FLIGHT, **partition) == 2
        epoch = [2]
        os.kill(setup.stopped, signal.SIGSTOP)
        try:
            scraped_once(leader, lambda samples: value(samples, TIMED_OUT, **partition) == 4,
                         "the second lock of A's records to run out, and their write to start, while C is stopped")
            assert _share_fetch(setup, 2, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(2, 3, 1)])}
            seen = scraped_once(leader, lambda samples: _renewed(setup, epoch) and value(
                samples, IN_FLIGHT, **partition) == 2, "A's archived records out of L's window while C is stopped")
        finally:
            os.kill(setup.stopped, signal.SIGCONT)
        eventually(lambda: _renewed(setup, epoch) and _stored(setup) == (2, [(2, 3, 0, 0)]),
                   "C to be given, by a write made after the failed one, the start offset 2 and records 2-3")
        assert value(seen, TIMED_OUT, **partition) == 4
        assert value(seen, "pybroker_share_records_archived_total", **partition) == 2


def _renewed(setup: Setup, epoch: list[int]) -> bool:
    """m1's RENEW of A's records 2-3 (ShareAcknowledge v2): their lock starts again, nothing is written."""
    epoch[0] += 1
    R = ShareAcknowledgeRequest
    answer = setup.client.request(R(group_id=GROUP, member_id="m1", share_session_epoch=epoch[0], is_renew_ack=True,
                                    topics=[R.AcknowledgeTopic(topic_id=setup.topic_id, partitions=[
                                        R.AcknowledgePartition(partition_index=setup.a, acknowledgement_batches=[
                                            R.AcknowledgementBatch(first_offset=2, last_offset=3,
                                                                   acknowledge_types=[RENEW])])])]),
                                  2, ShareAcknowledgeResponse)
    assert answer.error_code == ErrorCode.NONE, answer
    assert [p.error_code for t in answer.responses for p in t.partitions] == [ErrorCode.NONE], answer
    return True


def _stored(setup: Setup) -> tuple[int, list[tuple[int, int, int, int]]]:
    """The start offset and state batches C's share coordinator holds for A."""
    found = _state_at_c(setup)
    return found.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                for b in found.state_batches]
