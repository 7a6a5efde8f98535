"""A ShareFetch naming several share-partitions not loaded yet starts all their loads at once, and an
acknowledgement to a share-partition still loading is answered without waiting for the load, as Kafka's
SharePartitionManager does: processShareFetch calls maybeInitialize on every share-partition of the fetch before
the fetch waits in the purgatory (completed when something is acquired, or at its max wait), and acknowledge
answers a share-partition it does not hold UNKNOWN_TOPIC_OR_PARTITION and one still initializing
INVALID_RECORD_STATE (SharePartition.acknowledge finds nothing in its empty cache), never waiting for a load; the
acknowledgements of a request's partitions are applied and written at once, the answer sent when all are done.

The topic is led by one broker (L). ``__share_group_state`` has three partitions of one replica each, one on each
broker: share-partition A's state is kept by another broker (C), B's by the third (D), so that both loads go over
the wire. C is stopped (SIGSTOP), so A's load or write (L's request to C) cannot end while it is, and B's can:
what L answers, or what D holds, meanwhile shows whether B had to wait for A.
"""

from __future__ import annotations

import os
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from pybroker.common.topic import topic_id_to_string
from pybroker.coordinator.share_state.records import ShareKey, partition_of
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ProduceRequest,
    ProduceResponse,
    ShareGroupHeartbeatResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)
from pybroker.records.record import RecordInput, build_batch
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import create_topic, wait_for_full_isr
from tests.cluster.test_share_failover import GROUP_KEY, SHARE_KEY, _broker, _coordinator, _topic_id
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_group_configs_durable import group_overrides
from tests.integration.test_share_groups_wire import _beat

TOPIC, GROUP = "share-loads", "share-loads-group"
STATE_PARTITIONS = 3
PARTITIONS = 24
"""Enough partitions for one whose state C keeps and one whose state D keeps, whatever id the topic gets."""
ACCEPT = 1
EXTRA = {"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
         "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1",
         # the persister's wait for C's answer: A's load cannot give up while the test looks
         "share.coordinator.write.timeout.ms": "60000"}


@dataclass
class Setup:
    cluster: Cluster
    client: WireClient  # at L
    topic_id: uuid.UUID
    a: int  # its state on C
    b: int  # its state on D
    stopped: int  # C's pid
    at_third: WireClient  # at D


@contextmanager
def _setup(tmp_path: Path, extra: dict[str, str] = EXTRA) -> Iterator[Setup]:
    """The cluster, the topic with A and B chosen, the group reading from the earliest offset, three records in B,
    and member m1 assigned the topic (the share-partitions' state initialized, none loaded by L yet)."""
    with running_cluster(tmp_path, extra=extra) as cluster:
        _coordinator(cluster, f"{GROUP}:{topic_id_to_string(uuid.uuid4())}:0", SHARE_KEY)  # creates __share_group_state
        leaders = {p: state[0] for p, state in wait_for_full_isr(cluster, "__share_group_state").items()}
        assert sorted(leaders.values()) == [0, 1, 2], leaders  # one replica each, spread over the brokers
        leader, stopped, third = leaders[0], leaders[1], leaders[2]
        create_topic(cluster, TOPIC, PARTITIONS, assignment=[[leader]] * PARTITIONS)
        wait_for_full_isr(cluster, TOPIC)
        client = _broker(cluster, leader)
        topic_id = _topic_id(client, TOPIC)
        on = {p: leaders[partition_of(ShareKey(GROUP, topic_id, p), STATE_PARTITIONS)] for p in range(PARTITIONS)}
        a, b = (next(p for p in range(PARTITIONS) if on[p] == node) for node in (stopped, third))

        resource = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        eventually(lambda: group_overrides(client, GROUP) == {"share.auto.offset.reset": "earliest"},
                   "L to see the group config")
        _produce(client, b, 3)
        _join(cluster)  # every share-partition's state initialized
        process = cluster.brokers[stopped].process
        assert process is not None
        client.sock.settimeout(60)
        at_third = _broker(cluster, third)
        try:
            yield Setup(cluster, client, topic_id, a, b, process.pid, at_third)
        finally:
            client.close()
            at_third.close()


def test_a_fetch_starts_the_loads_of_its_share_partitions_at_once(tmp_path: Path) -> None:
    """m1's first fetch names A, then B. Before, L loaded them one after another: B's load started only once A's
    had ended or the fetch's wait was over, so the fetch answered nothing; now B's records are answered while A's
    load still waits for C."""
    with _setup(tmp_path) as setup:
        os.kill(setup.stopped, signal.SIGSTOP)
        try:
            answer = _share_fetch(setup, 0, [setup.a, setup.b], max_wait_ms=15_000)
        finally:
            os.kill(setup.stopped, signal.SIGCONT)
        assert answer == {setup.a: (ErrorCode.NONE, []), setup.b: (ErrorCode.NONE, [(0, 2, 1)])}


def test_an_acknowledgement_does_not_wait_for_a_load(tmp_path: Path) -> None:
    """m1 holds B's three records; a fetch adds A to its session, starting A's load, which waits for C. Before, a
    ShareAcknowledge naming A and B waited for A's load before acknowledging anything; now it is answered while
    A's load still waits, A refused as Kafka refuses a share-partition still initializing, B's acknowledgement
    applied and written."""
    with _setup(tmp_path) as setup:
        assert _share_fetch(setup, 0, [setup.b], max_wait_ms=15_000) == {setup.b: (ErrorCode.NONE, [(0, 2, 1)])}
        os.kill(setup.stopped, signal.SIGSTOP)
        try:
            assert _share_fetch(setup, 1, [setup.a], max_wait_ms=0) == {}  # A's load starts
            answer = _share_acknowledge(setup, 2, {setup.a: (0, 0), setup.b: (0, 2)})
        finally:
            os.kill(setup.stopped, signal.SIGCONT)
        assert answer == {setup.a: ErrorCode.INVALID_RECORD_STATE, setup.b: ErrorCode.NONE}
        assert _start_offset(setup, setup.b) == 3  # B's three records acknowledged: written


def test_the_acknowledgements_of_a_request_are_written_at_once(tmp_path: Path) -> None:
    """m1 holds records of A and of B; C, which keeps A's state, is stopped. A ShareAcknowledge of A then B is
    answered once both writes are done, as Kafka's (it answers when every partition's acknowledgement is), but B's
    write is not held back by A's: before, the partitions were acknowledged one after another, and B's write was
    sent only once A's had ended."""
    with _setup(tmp_path) as setup:
        _produce(setup.client, setup.a, 2)
        assert _share_fetch(setup, 0, [setup.b], max_wait_ms=15_000) == {setup.b: (ErrorCode.NONE, [(0, 2, 1)])}
        assert _share_fetch(setup, 1, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 1, 1)])}
        with ThreadPoolExecutor(1) as pool:
            os.kill(setup.stopped, signal.SIGSTOP)
            try:
                answer = pool.submit(_share_acknowledge, setup, 2, {setup.a: (0, 1), setup.b: (0, 2)})
                eventually(lambda: _start_offset(setup, setup.b) == 3, "B's acknowledgement written while A's waits")
            finally:
                os.kill(setup.stopped, signal.SIGCONT)
            assert answer.result() == {setup.a: ErrorCode.NONE, setup.b: ErrorCode.NONE}


def _join(cluster: Cluster) -> None:
    """m1 joins and heartbeats until it is assigned the topic, at the group's coordinator found again at each try:
    the broker FindCoordinator names may not know yet that it is (NOT_COORDINATOR: ``__consumer_offsets`` was just
    created)."""
    last: list[ShareGroupHeartbeatResponse] = []

    def assigned() -> bool:
        wire = _broker(cluster, _coordinator(cluster, GROUP, GROUP_KEY))
        try:
            answer = _beat(wire, GROUP, "m1", last[-1].member_epoch if last else 0, [TOPIC])
        finally:
            wire.close()
        if answer.error_code != ErrorCode.NONE:
            return False
        last.append(answer)
        return answer.assignment is not None and bool(answer.assignment.topic_partitions)

    eventually(assigned, lambda: f"m1 to be assigned {TOPIC} (last answer {last[-1:]})")


def _produce(client: WireClient, partition: int, count: int) -> None:
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(
            index=partition, records=build_batch([RecordInput(b"k", b"v%d" % i) for i in range(count)]))])])
    assert client.request(request, 9, ProduceResponse).responses[0].partition_responses[0].error_code == 0


def _share_fetch(setup: Setup, epoch: int, partitions: list[int],
                 max_wait_ms: int) -> dict[int, tuple[ErrorCode, list[tuple[int, int, int]]]]:
    answer = setup.client.request(ShareFetchRequest(
        group_id=GROUP, member_id="m1", share_session_epoch=epoch, max_wait_ms=max_wait_ms, min_bytes=1,
        max_records=100, topics=[ShareFetchRequest.FetchTopic(topic_id=setup.topic_id, partitions=[
            ShareFetchRequest.FetchPartition(partition_index=p) for p in partitions])]), 1, ShareFetchResponse)
    assert answer.error_code == ErrorCode.NONE, answer
    return {p.partition_index: (p.error_code, [(a.first_offset, a.last_offset, a.delivery_count)
                                               for a in p.acquired_records])
            for t in answer.responses for p in t.partitions}


def _share_acknowledge(setup: Setup, epoch: int, offsets: dict[int, tuple[int, int]]) -> dict[int, ErrorCode]:
    R = ShareAcknowledgeRequest
    answer = setup.client.request(R(group_id=GROUP, member_id="m1", share_session_epoch=epoch, topics=[
        R.AcknowledgeTopic(topic_id=setup.topic_id, partitions=[R.AcknowledgePartition(
            partition_index=p, acknowledgement_batches=[R.AcknowledgementBatch(
                first_offset=first, last_offset=last, acknowledge_types=[ACCEPT])])
            for p, (first, last) in offsets.items()])]), 1, ShareAcknowledgeResponse)
    assert answer.error_code == ErrorCode.NONE, answer
    return {p.partition_index: p.error_code for t in answer.responses for p in t.partitions}


def _start_offset(setup: Setup, partition: int) -> int:
    """The start offset D's share coordinator holds for the share-partition."""
    R = ReadShareGroupStateRequest
    found = setup.at_third.request(R(group_id=GROUP, topics=[R.ReadStateData(topic_id=setup.topic_id, partitions=[
        R.PartitionData(partition=partition, leader_epoch=-1)])]), 0,
        ReadShareGroupStateResponse).results[0].partitions[0]
    assert found.error_code == ErrorCode.NONE, found
    return found.start_offset
