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
from pybroker.protocol.messages import ReadShareGroupStateRequest, ReadShareGroupStateResponse
from tests.cluster.test_share_failover import _broker
from tests.cluster.test_share_fetch_while_acks_written import _leader
from tests.cluster.test_share_loads_at_once import EXTRA, GROUP, TOPIC, Setup, _produce, _setup, _share_fetch
from tests.eventually import eventually
from tests.integration.test_share_metrics import scrape, scraped_once, value

EXPIRING = {**EXTRA, "zookeeper.session.timeout.ms": "30000",  # C stays registered while it is stopped
            "share.coordinator.write.timeout.ms": "3000", "group.share.delivery.count.limit": "2",
            "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "1000"}
IN_FLIGHT = "kafka_server_sharepartitionmetrics_inflightmessagecount"


def test_records_archived_by_a_lock_timeout_leave_the_window_when_the_write_fails(tmp_path: Path) -> None:
    """m1 acquires A's two records twice (the first lock runs out: delivered again); with C stopped the second lock
    runs out too, archiving them at the limit of 2, and L's write of that fails (C does not answer). L's in-flight
    count of A goes to 0 all the same (it stayed at 2 before, until C ran again); once C runs, L's next write gives
    C the start offset 2."""
    with _setup(tmp_path, EXPIRING) as setup:
        _produce(setup.client, setup.a, 2)
        assert _share_fetch(setup, 0, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 1, 1)])}
        # the lock runs out, its write is taken: the records are delivered again, to this waiting fetch
        assert _share_fetch(setup, 1, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 1, 2)])}
        leader = setup.cluster.brokers[_leader(setup)]
        partition = {"group": GROUP, "topic": TOPIC, "partition": str(setup.a)}
        assert value(scrape(leader), IN_FLIGHT, **partition) == 2
        os.kill(setup.stopped, signal.SIGSTOP)
        try:
            seen = scraped_once(leader, lambda samples: value(samples, IN_FLIGHT, **partition) == 0,
                                "A's archived records out of L's window while C is stopped")
        finally:
            os.kill(setup.stopped, signal.SIGCONT)
        assert value(seen, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **partition) == 4
        assert value(seen, "pybroker_share_records_archived_total", **partition) == 2
        eventually(lambda: _stored_start_offset(setup) == 2, "C to be given the start offset past the archived records")


def _stored_start_offset(setup: Setup) -> int:
    """The start offset C's share coordinator holds for A."""
    at_c = _broker(setup.cluster, next(i for i, broker in enumerate(setup.cluster.brokers)
                                       if broker.process is not None and broker.process.pid == setup.stopped))
    try:
        R = ReadShareGroupStateRequest
        found = at_c.request(R(group_id=GROUP, topics=[R.ReadStateData(topic_id=setup.topic_id, partitions=[
            R.PartitionData(partition=setup.a, leader_epoch=-1)])]), 0,
            ReadShareGroupStateResponse).results[0].partitions[0]
    finally:
        at_c.close()
    assert found.error_code == ErrorCode.NONE, found
    return found.start_offset
