"""A closing request's state write does not cost the member what it did meanwhile. A share-partition is not dropped
while its state write is under way. A request that closes its member's share
session (epoch -1) takes the session out of the cache at once, then writes its acknowledgements, and only then
releases what the member still holds. The share service's once-a-second pass drops the share-partitions of groups
with no share session open: before, it dropped one whose closing request's write was still waiting, so the release
that followed found nothing, and the next leader read the held records at their count before that delivery (they
were delivered again with count 1, not 2; seen once as a flake of ``test_share_ack_disconnect``).

The set-up of ``test_share_loads_at_once``: the topic is led by L, share-partition A's state is kept by broker C,
stopped (SIGSTOP) to hold A's write. That the pass ran while the write waited is seen on another group's
share-partition (B, kept by D): its records, acquired under a one-second lock after the session closed, time out
in the pass, counted by L's ``kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total``. Nor is a share
session the member opened while the write waited closed when it ends.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from pybroker.coordinator.share_state.records import ShareKey, partition_of
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import response_header_version
from pybroker.protocol.messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)
from tests.cluster.test_share_ack_disconnect import _acknowledgement, _send, _session_error, _start_offset_at_c
from tests.cluster.test_share_failover import GROUP_KEY, _broker, _coordinator
from tests.cluster.test_share_loads_at_once import (
    EXTRA, GROUP, STATE_PARTITIONS, TOPIC, Setup, _produce, _setup, _share_acknowledge, _share_fetch)
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_wire import _beat
from tests.integration.test_share_metrics import scraped_once, value

TIMER_PREFIX = "share-close-timer"
TIMED_OUT = "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total"
PASS_EXTRA = {**EXTRA, "group.share.record.lock.duration.ms": "60000", "group.share.min.record.lock.duration.ms": "1000",
              "zookeeper.session.timeout.ms": "30000"}  # C stays registered while it is stopped


def test_a_share_partition_whose_closing_write_waits_is_not_dropped(tmp_path: Path) -> None:
    """m1 holds A's four records; with C stopped, m1's ShareAcknowledge accepts 0-1 and closes its session, and its
    write waits for C. The pass runs meanwhile (B's one-second locks of the other group time out in it). Once C runs
    again, the closing releases records 2-3, written with their count: m1's next session acquires them with count
    2 (before, A had been dropped: count 1)."""
    with _setup(tmp_path, PASS_EXTRA) as setup:
        timer = _timer_group(setup)
        _produce(setup.client, setup.a, 4)
        assert _share_fetch(setup, 0, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 3, 1)])}
        _close_while_the_pass_runs(setup, timer)
        released = eventually(lambda: _share_fetch(setup, 0, [setup.a], max_wait_ms=0)[setup.a][1],
                              "records 2-3 to be released by the closing of the session", timeout=20)
        assert released == [(2, 3, 2)]
        assert _start_offset_at_c(setup) == 2


def test_the_closing_member_s_other_share_partitions_are_not_dropped_while_its_write_waits(tmp_path: Path) -> None:
    """As above, but m1 also holds B's three records, which its closing request does not name: B has no write under
    way, and the pass dropped it while A's write waited, so the release found no B, and B's records came back from
    its state with count 1. The group's share-partitions are kept until the closing request's release: B's records
    are released by it, with their count."""
    with _setup(tmp_path, PASS_EXTRA) as setup:
        timer = _timer_group(setup)
        _produce(setup.client, setup.a, 4)
        held = _share_fetch(setup, 0, [setup.a, setup.b], max_wait_ms=15_000)
        loading = [p for p in (setup.a, setup.b) if not held[p][1]]  # answered once one had records
        if loading:
            held.update(_share_fetch(setup, 1, loading, max_wait_ms=15_000))
        assert held == {setup.a: (ErrorCode.NONE, [(0, 3, 1)]), setup.b: (ErrorCode.NONE, [(0, 2, 1)])}
        _close_while_the_pass_runs(setup, timer)
        released = eventually(lambda: _share_fetch(setup, 0, [setup.a], max_wait_ms=0)[setup.a][1],
                              "records 2-3 of A to be released by the closing of the session", timeout=20)
        assert released == [(2, 3, 2)]
        again = eventually(lambda: _share_fetch(setup, 0, [setup.b], max_wait_ms=0)[setup.b][1],
                           "B's records to be released by the closing of the session", timeout=20)
        assert again == [(0, 2, 2)]


def test_a_session_opened_while_the_closing_write_waits_stays_open(tmp_path: Path) -> None:
    """m1 holds A's four records; with C stopped, m1's ShareAcknowledge accepts 0-1 and closes its session, and its
    write waits for C. Meanwhile two more records come and m1 opens a new share session (epoch 0), acquiring them.
    Once C runs again the closing is answered and releases what m1 held when it came, records 2-3, but not 4-5, and
    the new session goes on: at epoch 1 it acquires 2-3 again, at epoch 2 it accepts 2-5. Before, the end of the
    closing took m1 as gone: it removed m1's session, the new one (SHARE_SESSION_NOT_FOUND), and released 4-5."""
    extra = {**EXTRA, "group.share.record.lock.duration.ms": "60000"}
    with _setup(tmp_path, extra) as setup:
        _produce(setup.client, setup.a, 4)
        assert _share_fetch(setup, 0, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 3, 1)])}
        host, port = setup.client.sock.getpeername()[:2]
        closing = WireClient(f"{host}:{port}")
        closing.sock.settimeout(60)
        os.kill(setup.stopped, signal.SIGSTOP)
        try:
            _send(closing, _acknowledgement(setup.topic_id, setup.a, -1))
            eventually(lambda: _session_error(setup) == ErrorCode.SHARE_SESSION_NOT_FOUND,
                       "the closing of m1's session to be taken")
            _produce(setup.client, setup.a, 2)
            assert _share_fetch(setup, 0, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(4, 5, 1)])}
        finally:
            os.kill(setup.stopped, signal.SIGCONT)
        try:
            frame = closing.read_frame()
        finally:
            closing.close()
        offset = 4 + (1 if response_header_version(ShareAcknowledgeRequest.API_KEY, 1) == 1 else 0)
        answer = ShareAcknowledgeResponse.decode(frame[offset:], 1)
        assert [p.error_code for t in answer.responses for p in t.partitions] == [ErrorCode.NONE]
        assert _share_fetch(setup, 1, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(2, 3, 2)])}
        assert _share_acknowledge(setup, 2, {setup.a: (2, 5)}) == {setup.a: ErrorCode.NONE}
        eventually(lambda: _start_offset_at_c(setup) == 6, "C to hold A's start offset past the accepted records")


def _close_while_the_pass_runs(setup: Setup, timer: str) -> None:
    """With C stopped, m1's ShareAcknowledge accepts A's 0-1 and closes its session, from a connection then dropped;
    its write waits for C while the once-a-second pass runs (seen when the timer group's one-second locks of B time
    out in it); then C runs again."""
    leader = _leader(setup)
    host, port = setup.client.sock.getpeername()[:2]
    os.kill(setup.stopped, signal.SIGSTOP)
    try:
        gone = WireClient(f"{host}:{port}")
        _send(gone, _acknowledgement(setup.topic_id, setup.a, -1))
        eventually(lambda: _session_error(setup) == ErrorCode.SHARE_SESSION_NOT_FOUND,
                   "the closing of m1's session to be taken")
        assert _timer_fetch(setup, timer) == [(0, 2, 1)]  # under a one-second lock
        scraped_once(setup.cluster.brokers[leader], lambda samples: value(
            samples, TIMED_OUT, group=timer, topic=TOPIC, partition=str(setup.b)) == 3,
            "the pass to time B's records of the timer group out while A's write waits for C")
    finally:
        os.kill(setup.stopped, signal.SIGCONT)
    gone.close()


def _leader(setup: Setup) -> int:
    port = setup.client.sock.getpeername()[1]
    return next(i for i, broker in enumerate(setup.cluster.brokers) if broker.port == port)


def _timer_group(setup: Setup) -> str:
    """The other group, reading from the earliest offset under a one-second lock, with member t1 assigned the
    topic (its share-partitions initialized). Its name is chosen so that its B's state is kept where the first
    group's is, by D: kept by the stopped C, t1's fetch would wait for B's load and get nothing (a third of the
    topic ids drawn did so with one fixed name)."""
    state_partition = partition_of(ShareKey(GROUP, setup.topic_id, setup.b), STATE_PARTITIONS)
    group = next(name for name in (f"{TIMER_PREFIX}-{i}" for i in range(1000))
                 if partition_of(ShareKey(name, setup.topic_id, setup.b), STATE_PARTITIONS) == state_partition)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.record.lock.duration.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": setup.cluster.bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    epoch = [0]

    def assigned() -> bool:
        wire = _broker(setup.cluster, _coordinator(setup.cluster, group, GROUP_KEY))
        try:
            answer = _beat(wire, group, "t1", epoch[0], [TOPIC])
        finally:
            wire.close()
        if answer.error_code != ErrorCode.NONE:
            return False
        epoch[0] = answer.member_epoch
        return answer.assignment is not None and bool(answer.assignment.topic_partitions)
    eventually(assigned, f"t1 to be assigned {TOPIC}")
    return group


def _timer_fetch(setup: Setup, group: str) -> list[tuple[int, int, int]]:
    """t1's first ShareFetch of B (a new session): the records it acquired."""
    R = ShareFetchRequest
    answer = setup.client.request(R(
        group_id=group, member_id="t1", share_session_epoch=0, max_wait_ms=15_000, min_bytes=1, max_records=100,
        topics=[R.FetchTopic(topic_id=setup.topic_id, partitions=[R.FetchPartition(partition_index=setup.b)])]),
        1, ShareFetchResponse)
    assert answer.error_code == ErrorCode.NONE, answer
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]
