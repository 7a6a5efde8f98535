"""Share-partition state survives a broker restart (KIP-932's share coordinator and ``__share_group_state``).

A protocol-level share consumer acquires ten records and acknowledges some of them: accepts 0-3, rejects 4,
releases 5-6, and still holds 7-9 when the broker goes down (SIGTERM or SIGKILL). After the restart a real share
consumer (confluent-kafka's ShareConsumer) gets exactly the records that were not acknowledged, with the delivery
counts the acknowledgements left (released ones were delivered once already; held ones come back as never
acknowledged), and then the record produced after the restart."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer

from pybroker.protocol.error_codes import ErrorCode
from pybroker.common.topic import topic_id_to_string
from pybroker.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareFetchResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_confluent import _consumer, _produce, _topic_and_group
from tests.integration.test_share_groups_wire import _beat, _fetch, _join

ACCEPT, RELEASE, REJECT = 1, 2, 3


def _acquire_all(client: WireClient, group: str, topic_id: uuid.UUID) -> tuple[ShareFetchResponse, int]:
    """The first ShareFetch of the member that acquires something (the share-partition's state is read first), and
    the share session's next epoch."""
    epoch = 0

    def acquired() -> ShareFetchResponse | None:
        nonlocal epoch
        response = _fetch(client, group, "holder", epoch, topic_id)
        epoch += 1
        partitions = [p for t in response.responses for p in t.partitions]
        return response if partitions and partitions[0].acquired_records else None

    return eventually(acquired, "records acquired"), epoch


def _acknowledge(client: WireClient, group: str, topic_id: uuid.UUID, epoch: int, types: list[int]) -> int:
    batch = ShareAcknowledgeRequest.AcknowledgementBatch(first_offset=0, last_offset=len(types) - 1,
                                                         acknowledge_types=types)
    response = client.request(ShareAcknowledgeRequest(
        group_id=group, member_id="holder", share_session_epoch=epoch, topics=[ShareAcknowledgeRequest.AcknowledgeTopic(
            topic_id=topic_id, partitions=[ShareAcknowledgeRequest.AcknowledgePartition(
                partition_index=0, acknowledgement_batches=[batch])])]), 1, ShareAcknowledgeResponse)
    assert response.error_code == ErrorCode.NONE
    return response.responses[0].partitions[0].error_code


@pytest.mark.parametrize("shutdown", ["SIGTERM", "SIGKILL"])
def test_acknowledged_state_survives_a_restart(tmp_path: Path, shutdown: str) -> None:
    broker = BrokerProcess(tmp_path).start()
    topic, group = "durable-share", "durable-share-group"
    try:
        _topic_and_group(broker.bootstrap, topic, group)
        _produce(broker.bootstrap, topic, [f"r{i}" for i in range(10)])
        holder = WireClient(broker.bootstrap)
        _join(holder, group, "holder", [topic])
        topic_id = holder.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12,
                                  MetadataResponse).topics[0].topic_id
        fetched, epoch = _acquire_all(holder, group, topic_id)
        acquired = fetched.responses[0].partitions[0].acquired_records
        assert [(a.first_offset, a.last_offset) for a in acquired] == [(0, 9)]
        assert _acknowledge(holder, group, topic_id, epoch, [ACCEPT] * 4 + [REJECT] + [RELEASE] * 2) == ErrorCode.NONE
        holder.close()

        broker.stop() if shutdown == "SIGTERM" else broker.kill()
        broker.start()

        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, value=b"after")
        assert producer.flush(20) == 0
        with _consumer(broker.bootstrap, group, explicit=True) as consumer:
            consumer.subscribe([topic])
            got: list[tuple[int, bytes, int]] = []

            def until_after() -> bool:
                for message in consumer.poll(0.5):
                    if message.error() is None:
                        got.append((message.offset(), message.value(), message.delivery_count()))
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                consumer.commit_sync()
                return any(value == b"after" for _, value, _ in got)

            eventually(until_after, "the record produced after the restart")
        assert got == [(5, b"r5", 2), (6, b"r6", 2), (7, b"r7", 1), (8, b"r8", 1), (9, b"r9", 1),
                       (10, b"after", 1)]
    finally:
        broker.kill()


def test_share_coordinator_refuses_what_kafka_refuses(tmp_path: Path) -> None:
    """The state RPCs on the wire: an uninitialized share-partition, stale state and leader epochs, oversized state
    batches, and a share coordinator key that is not groupId:topicId:partition."""
    broker = BrokerProcess(tmp_path, {"share.coordinator.state.topic.num.partitions": "3"}).start()
    try:
        client = WireClient(broker.bootstrap)
        topic_id = uuid.uuid4()
        key = f"g:{topic_id_to_string(topic_id)}:0"
        found = eventually(lambda: _found(client, key), "the share coordinator")
        assert found.node_id == 0
        assert _find(client, "g:not-a-topic-id:0").error_code == ErrorCode.INVALID_REQUEST

        def read(leader_epoch: int) -> ReadShareGroupStateResponse.PartitionResult:
            R = ReadShareGroupStateRequest
            return client.request(R(group_id="g", topics=[R.ReadStateData(topic_id=topic_id, partitions=[
                R.PartitionData(partition=0, leader_epoch=leader_epoch)])]), 0,
                ReadShareGroupStateResponse).results[0].partitions[0]

        def write(state_epoch: int, leader_epoch: int, batches: int = 1) -> int:
            R = WriteShareGroupStateRequest
            return client.request(R(group_id="g", topics=[R.WriteStateData(topic_id=topic_id, partitions=[
                R.PartitionData(partition=0, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=0,
                                state_batches=[R.StateBatch(first_offset=i, last_offset=i, delivery_state=2 + 2 * (i % 2),
                                                            delivery_count=1) for i in range(batches)])])]), 1,
                WriteShareGroupStateResponse).results[0].partitions[0].error_code

        uninitialized = eventually(lambda: (answer := read(0)).error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                                   and answer, "the share coordinator loaded")
        assert uninitialized.error_code == ErrorCode.INVALID_REQUEST
        assert uninitialized.error_message == "Read operation on uninitialized share partition not allowed."
        assert write(0, 0) == ErrorCode.INVALID_REQUEST
        R = InitializeShareGroupStateRequest
        initialized = client.request(R(group_id="g", topics=[R.InitializeStateData(topic_id=topic_id, partitions=[
            R.PartitionData(partition=0, state_epoch=3, start_offset=0)])]), 0, InitializeShareGroupStateResponse)
        assert initialized.results[0].partitions[0].error_code == ErrorCode.NONE
        assert read(7).error_code == ErrorCode.NONE
        assert write(2, 7) == ErrorCode.FENCED_STATE_EPOCH
        assert write(3, 6) == ErrorCode.FENCED_LEADER_EPOCH
        assert write(3, 7, batches=10001) == ErrorCode.INVALID_REQUEST
        assert write(3, 7, batches=2) == ErrorCode.NONE
        assert [(b.first_offset, b.last_offset, b.delivery_state) for b in read(7).state_batches] == \
            [(0, 0, 2), (1, 1, 4)]
        client.close()
    finally:
        broker.kill()


def _find(client: WireClient, key: str) -> FindCoordinatorResponse.Coordinator:
    return client.request(FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), 6,
                          FindCoordinatorResponse).coordinators[0]


def _found(client: WireClient, key: str) -> FindCoordinatorResponse.Coordinator | None:
    found = _find(client, key)
    return found if found.error_code == ErrorCode.NONE else None


def _stored(client: WireClient, group: str, topic_id: uuid.UUID) -> list[tuple[int, int, int, int]] | None:
    """The share-partition's stored state batches (first, last, state, count), read as a broker would (leader epoch
    -1 fences nothing); None while the coordinator has none to give."""
    R = ReadShareGroupStateRequest
    found = client.request(R(group_id=group, topics=[R.ReadStateData(topic_id=topic_id, partitions=[
        R.PartitionData(partition=0, leader_epoch=-1)])]), 0, ReadShareGroupStateResponse).results[0].partitions[0]
    if found.error_code != ErrorCode.NONE:
        return None
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in found.state_batches]


def _holding(client: WireClient, bootstrap: str, topic: str, group: str, count: int, **configs: str) -> uuid.UUID:
    """A group reading ``topic`` from its start, with ``count`` records produced and all held by member "holder"."""
    _topic_and_group(bootstrap, topic, group, **configs)
    _produce(bootstrap, topic, [f"r{i}" for i in range(count)])
    _join(client, group, "holder", [topic])
    topic_id = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12,
                              MetadataResponse).topics[0].topic_id
    fetched, _ = _acquire_all(client, group, topic_id)
    assert fetched.responses[0].partitions[0].acquired_records[-1].last_offset == count - 1
    return topic_id


def test_releases_and_lock_timeouts_are_written(tmp_path: Path) -> None:
    """Records released because their member left, and records whose acquisition lock ran out, are stored with the
    delivery count they reached (Kafka writes on both), so after a crash they come back as delivered once before;
    deleting the group deletes its stored state."""
    broker = BrokerProcess(tmp_path, {"group.share.min.record.lock.duration.ms": "1000"}).start()
    try:
        client = WireClient(broker.bootstrap)
        left_id = _holding(client, broker.bootstrap, "share-left", "share-left-group", 3)
        assert _stored(client, "share-left-group", left_id) == []  # acquisitions are not written
        _beat(client, "share-left-group", "holder", -1)  # the member leaves: its records are released
        eventually(lambda: _stored(client, "share-left-group", left_id) == [(0, 2, 0, 1)], "the release written")

        timed_id = _holding(client, broker.bootstrap, "share-timed", "share-timed-group", 2,
                            **{"share.record.lock.duration.ms": "1000"})
        eventually(lambda: _stored(client, "share-timed-group", timed_id) == [(0, 1, 0, 1)],
                   "the lock timeout written, with no request to notice it")
        client.close()

        broker.kill()
        broker.start()
        client = WireClient(broker.bootstrap)
        _join(client, "share-left-group", "next", ["share-left"])
        again = eventually(lambda: _fetch(client, "share-left-group", "next", 0, left_id).responses, "a redelivery")
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in again[0].partitions[0].acquired_records] == [(0, 2, 2)]

        _beat(client, "share-left-group", "next", -1)
        eventually(lambda: _stored(client, "share-left-group", left_id) == [(0, 2, 0, 2)], "the release written")
        deleted = client.request(DeleteGroupsRequest(groups_names=["share-left-group"]), 2, DeleteGroupsResponse)
        assert deleted.results[0].error_code == ErrorCode.NONE
        assert _stored(client, "share-left-group", left_id) is None  # DeleteShareGroupState, as Kafka deletes it
        client.close()
    finally:
        broker.kill()


def test_redundant_state_records_are_pruned(tmp_path: Path) -> None:
    """Records older than a share-partition's latest snapshot are deleted from __share_group_state (Kafka's
    pruning, every share.coordinator.state.topic.prune.interval.ms), an idle share-partition gets a fresh snapshot
    (share.coordinator.cold.partition.snapshot.interval.ms) so that it holds nothing back, and the state still
    loads after a crash."""
    broker = BrokerProcess(tmp_path, {"share.coordinator.state.topic.num.partitions": "1",
                                      "share.coordinator.snapshot.update.records.per.snapshot": "2",
                                      "share.coordinator.state.topic.prune.interval.ms": "200",
                                      "share.coordinator.cold.partition.snapshot.interval.ms": "1000"}).start()
    try:
        client = WireClient(broker.bootstrap)
        idle_id, topic_id = uuid.uuid4(), uuid.uuid4()
        eventually(lambda: _found(client, f"g:{topic_id_to_string(topic_id)}:0"), "the share coordinator")
        R = InitializeShareGroupStateRequest
        W = WriteShareGroupStateRequest

        def initialize(share_id: uuid.UUID) -> bool:
            return client.request(R(group_id="g", topics=[R.InitializeStateData(topic_id=share_id, partitions=[
                R.PartitionData(partition=0, state_epoch=0, start_offset=0)])]), 0,
                InitializeShareGroupStateResponse).results[0].partitions[0].error_code == ErrorCode.NONE

        def write(share_id: uuid.UUID, offset: int) -> None:
            written = client.request(W(group_id="g", topics=[W.WriteStateData(topic_id=share_id, partitions=[
                W.PartitionData(partition=0, state_epoch=0, leader_epoch=0, start_offset=-1, state_batches=[
                    W.StateBatch(first_offset=offset, last_offset=offset, delivery_state=4, delivery_count=1)])])]),
                1, WriteShareGroupStateResponse)
            assert written.results[0].partitions[0].error_code == ErrorCode.NONE

        eventually(lambda: initialize(idle_id), "initialized")  # offset 0, then one update at 1: then idle
        write(idle_id, 0)
        assert initialize(topic_id)  # offset 2
        for offset in range(10):  # every third a snapshot: the last at offset 11
            write(topic_id, offset)
        expected = [(0, 9, 4, 1)]
        assert _stored(client, "g", topic_id) == expected
        # the idle share-partition's records go once it is snapshotted again (cold), the other's before offset 11
        eventually(lambda: _earliest(client) >= 11, "the records before the last snapshots deleted")
        client.close()
        broker.kill()
        broker.start()
        client = WireClient(broker.bootstrap)
        assert eventually(lambda: _stored(client, "g", topic_id), "the state loaded") == expected
        assert _stored(client, "g", idle_id) == [(0, 0, 4, 1)]
        client.close()
    finally:
        broker.kill()


def _earliest(client: WireClient) -> int:
    L = ListOffsetsRequest
    answer = client.request(L(replica_id=-1, topics=[L.ListOffsetsTopic(name="__share_group_state", partitions=[
        L.ListOffsetsPartition(partition_index=0, timestamp=-2)])]), 5, ListOffsetsResponse)
    return answer.topics[0].partitions[0].offset
