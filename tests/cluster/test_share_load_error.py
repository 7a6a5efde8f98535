"""A share-partition whose first load fails is answered with the partition's error in ShareFetch, and read again by
the next fetch, as Kafka's: SharePartitionManager drops a share-partition whose initialization failed and adds the
partition to the erroneous ones of the fetch that started it, its error mapped by SharePartition.fetchPersisterError
(a share coordinator not available, loading or moved is COORDINATOR_NOT_AVAILABLE), if the failure comes within that
fetch's max wait; a fetch that finds the share-partition initializing skips it (LEADER_NOT_AVAILABLE), and a fetch
does not wait for a load beyond its max wait (Java's 4.2 share consumer throws IllegalStateException from poll() for
COORDINATOR_NOT_AVAILABLE, so showing it where Kafka would not broke it: test_share_load_java.py).

Here the share coordinator (C, leader of ``__share_group_state``'s one partition, min ISR 2) cannot commit a write
while its follower is stopped (SIGSTOP): the leader of the topic (C too, so the persister's call is in-process)
reads the share-partition, initialized without a start offset, and must write the one "latest" gives before serving;
that write times out after share.coordinator.write.timeout.ms (1 s).
"""

from __future__ import annotations

import os
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor

from pybroker.common.topic import topic_id_to_string
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)
from tests.cluster.conftest import running_cluster
from tests.cluster.test_cluster import create_topic, wait_for_full_isr
from tests.cluster.test_share_failover import (
    GROUP,
    TOPIC,
    _acquire,
    _broker,
    _join,
    _open,
    _topic_id,
    coordinator_and_follower,
    one_commit_needs_two,
)
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_wire import _fetch, _produce


def test_a_load_failed_within_its_fetchs_wait_is_that_fetchs_error_and_the_next_fetch_loads_it_again(tmp_path) -> None:
    with running_cluster(tmp_path, extra=one_commit_needs_two()) as cluster:
        coordinator, follower = coordinator_and_follower(cluster, f"{GROUP}:{topic_id_to_string(uuid.uuid4())}:0")
        other = next(b for b in range(3) if b not in (coordinator, follower))
        create_topic(cluster, TOPIC, 1, assignment=[[coordinator, other]])
        wait_for_full_isr(cluster, TOPIC)
        client = _broker(cluster, coordinator)
        topic_id = _topic_id(client, TOPIC)
        _join(cluster, "m1")  # the share-partition's state is initialized (committed) before it is assigned

        stopped = cluster.brokers[follower].process
        assert stopped is not None
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            # The first fetch starts the load, which outlasts its wait (none): nothing, no error (before: the fetch
            # waited for the load and answered COORDINATOR_NOT_AVAILABLE). The next one finds it loading: its
            # failure (within this fetch's wait) is not this fetch's error, and this fetch starts no other load.
            # The third one starts a load that fails within its wait: the error, answered at the end of the wait
            # (a partition's failed load does not end it, as in Kafka's DelayedShareFetch).
            answers = [_partitions(_fetch_waiting(client, topic_id, epoch, max_wait_ms))
                       for epoch, max_wait_ms in ((0, 0), (1, 2000), (2, 10_000))]
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        assert answers == [[(0, ErrorCode.NONE, [])], [], [(0, ErrorCode.COORDINATOR_NOT_AVAILABLE, [])]]

        assert _fetch(client, GROUP, "m1", -1, None).error_code == ErrorCode.NONE  # closes m1's session
        epoch, stored = _open(client, "m1", topic_id, client)  # loaded again, its start offset stored
        assert stored == (0, [])
        _produce(client, TOPIC, 3)
        acquired, _ = _acquire(client, "m1", topic_id, epoch)
        assert acquired == [(0, 2, 1)]
        client.close()


def test_a_failed_load_does_not_end_the_wait_for_the_other_partitions(tmp_path) -> None:
    """m1's session holds partition 0, loaded; a fetch adds partition 1, whose load fails within the fetch's wait.
    As Kafka's (SharePartitionManager.handleInitializationException adds the partition to the fetch's erroneous
    ones; DelayedShareFetch completes on records to acquire, a log read error or its max wait), the fetch goes on
    waiting for partition 0, and answers the records produced to it after the failure with partition 1's error.
    Before, the failure ended the wait: partition 1's error alone, partition 0's records left to the next fetch."""
    with running_cluster(tmp_path, extra=one_commit_needs_two()) as cluster:
        coordinator, follower = coordinator_and_follower(cluster, f"{GROUP}:{topic_id_to_string(uuid.uuid4())}:0")
        other = next(b for b in range(3) if b not in (coordinator, follower))
        create_topic(cluster, TOPIC, 2, assignment=[[coordinator, other]] * 2)
        wait_for_full_isr(cluster, TOPIC)
        client, waiting = _broker(cluster, coordinator), _broker(cluster, coordinator)
        waiting.sock.settimeout(60)
        topic_id = _topic_id(client, TOPIC)
        _join(cluster, "m1")  # both partitions' state initialized (at once) before they are assigned
        epoch, _ = _open(client, "m1", topic_id, client)  # partition 0 loaded, with its start offset stored

        stopped = cluster.brokers[follower].process
        assert stopped is not None
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(1) as pool:
                answer = pool.submit(_fetch_waiting, waiting, topic_id, epoch, 15_000, 1)
                seen: list[ErrorCode] = []

                def load_failed() -> bool:
                    nonlocal epoch
                    code = _acknowledge_one(client, topic_id, epoch + 1, 1)
                    if code is not None:  # None: the fetch's epoch not taken yet
                        epoch += 1
                        seen.append(code)
                    # loading: INVALID_RECORD_STATE; once the load failed, not held: UNKNOWN_TOPIC_OR_PARTITION
                    return seen[-1:] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] and \
                        ErrorCode.INVALID_RECORD_STATE in seen
                eventually(load_failed, lambda: f"partition 1's load to fail (answers {seen})")
                assert not answer.done()
                _produce(client, TOPIC, 3)
                got = [(index, code, [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired])
                       for index, code, acquired in sorted(_partitions(answer.result(timeout=30)))]
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        assert got == [(0, ErrorCode.NONE, [(0, 2, 1)]), (1, ErrorCode.COORDINATOR_NOT_AVAILABLE, [])]
        client.close()
        waiting.close()


def _acknowledge_one(client: WireClient, topic_id: uuid.UUID, epoch: int, partition: int) -> ErrorCode | None:
    """m1's acknowledgement of offset 0 of ``partition`` at ``epoch``: the partition's answer, None when the
    epoch was refused."""
    R = ShareAcknowledgeRequest
    answer = client.request(R(group_id=GROUP, member_id="m1", share_session_epoch=epoch, topics=[R.AcknowledgeTopic(
        topic_id=topic_id, partitions=[R.AcknowledgePartition(partition_index=partition, acknowledgement_batches=[
            R.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1])])])]), 1,
        ShareAcknowledgeResponse)
    if answer.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH:
        return None
    assert answer.error_code == ErrorCode.NONE, answer
    return ErrorCode(answer.responses[0].partitions[0].error_code)


def _fetch_waiting(client: WireClient, topic_id: uuid.UUID, epoch: int, max_wait_ms: int,
                   partition: int = 0) -> ShareFetchResponse:
    """The answer, read with a socket timeout past the fetch's own wait (the answer may come at its end)."""
    client.sock.settimeout(max_wait_ms / 1000 + 20)
    return client.request(ShareFetchRequest(
        group_id=GROUP, member_id="m1", share_session_epoch=epoch, max_wait_ms=max_wait_ms, min_bytes=1,
        max_records=100, topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
            ShareFetchRequest.FetchPartition(partition_index=partition)])]), 1, ShareFetchResponse)


def _partitions(answer: ShareFetchResponse) -> list[tuple[int, ErrorCode, list]]:
    assert answer.error_code == ErrorCode.NONE, answer
    return [(p.partition_index, p.error_code, p.acquired_records) for t in answer.responses for p in t.partitions]
