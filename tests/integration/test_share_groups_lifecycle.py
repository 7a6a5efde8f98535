"""The group coordinator's share-partition state lifecycle (Kafka 4.2's ShareGroupStatePartitionMetadata), under
real write failures: a partition is assigned only once the share coordinator initialized its state, and a group's
deletion answers the failure of any of its writes, keeps the group, and is carried out by the next DeleteGroups.

The failures are real ones: an internal topic's ``min.insync.replicas`` raised above its one replica makes every
append to it fail (NOT_ENOUGH_REPLICAS) until it is set back, on a broker that is SIGKILLed and restarted between
the steps."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from pybroker.common.topic import topic_id_to_string
from pybroker.coordinator.records import decode_record
from pybroker.coordinator.share.records import STATE_PARTITION_METADATA, ShareGroupEntry
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
    ShareGroupStatePartitionMetadataValue,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_wire import _beat, _fetch, _join

SHARE_STATE, OFFSETS = "__share_group_state", "__consumer_offsets"
SHARE_KEY = 2


def _min_isr(bootstrap: str, topic: str, value: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("min.insync.replicas", str(value), incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic,
                                                                  incremental_configs=[entry])]).values():
        future.result(timeout=30)


def _topic(client: WireClient, name: str) -> uuid.UUID:
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1)]), 7, CreateTopicsResponse)
    assert created.topics[0].error_code == 0
    return created.topics[0].topic_id


def _share_state_topic(client: WireClient, group: str, topic_id: uuid.UUID) -> None:
    """``__share_group_state`` created and the share-partition's coordinator loaded: FindCoordinator names a
    coordinator as soon as its partition has a leader, before that leader has replayed the partition, so a read
    (which changes nothing) is asked until it no longer answers COORDINATOR_LOAD_IN_PROGRESS."""
    key = f"{group}:{topic_id_to_string(topic_id)}:0"
    eventually(lambda: client.request(FindCoordinatorRequest(key_type=SHARE_KEY, coordinator_keys=[key]), 6,
                                      FindCoordinatorResponse).coordinators[0].error_code == ErrorCode.NONE,
               "the share coordinator")
    eventually(lambda: _read(client, group, topic_id).error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
               "the share coordinator's partition loaded")


def _read(client: WireClient, group: str, topic_id: uuid.UUID) -> ReadShareGroupStateResponse.PartitionResult:
    R = ReadShareGroupStateRequest
    return client.request(R(group_id=group, topics=[R.ReadStateData(topic_id=topic_id, partitions=[
        R.PartitionData(partition=0, leader_epoch=-1)])]), 0, ReadShareGroupStateResponse).results[0].partitions[0]


def _stored(client: WireClient, group: str, topic_id: uuid.UUID) -> ErrorCode:
    """The share coordinator's answer to reading the share-partition: NONE once initialized, INVALID_REQUEST before."""
    return ErrorCode(_read(client, group, topic_id).error_code)


def _described(client: WireClient, group: str) -> ErrorCode:
    return ErrorCode(client.request(ShareGroupDescribeRequest(group_ids=[group]), 1,
                                    ShareGroupDescribeResponse).groups[0].error_code)


def _assigned(response: ShareGroupHeartbeatResponse) -> list[int] | None:
    if response.assignment is None:
        return None
    return [p for t in response.assignment.topic_partitions for p in t.partitions]


def test_a_partition_is_assigned_only_once_initialized_even_across_a_crash(tmp_path: Path) -> None:
    """The share coordinator cannot write: the member joins with nothing assigned and a ShareFetch of the partition
    finds no state (the leader does not make one up). The broker is SIGKILLed while the initialization is still being
    retried; after the restart the partition is still initializing, nothing is assigned, and once the share
    coordinator can write again a heartbeat after the retry interval initializes it and the next assigns it."""
    overrides = {"share.coordinator.write.timeout.ms": "60000", "group.share.initialize.retry.interval.ms": "1000",
                 "offsets.commit.timeout.ms": "1000"}
    broker = BrokerProcess(tmp_path, overrides).start()
    group, topic = "init-group", "init-topic"
    try:
        client = WireClient(broker.bootstrap)
        topic_id = _topic(client, topic)
        _share_state_topic(client, group, topic_id)
        _min_isr(broker.bootstrap, SHARE_STATE, 2)
        joined = _beat(client, group, "m1", 0, [topic])
        assert (joined.error_code, joined.member_epoch, _assigned(joined)) == (ErrorCode.NONE, 1, [])
        fetched = _fetch(client, group, "m1", 0, topic_id).responses[0].partitions[0]
        assert (fetched.error_code, fetched.acquired_records) == (ErrorCode.UNKNOWN_SERVER_ERROR, [])
        assert _stored(client, group, topic_id) is ErrorCode.INVALID_REQUEST
        client.close()

        broker.kill()  # the initialization is still being retried: its outcome never recorded
        broker.start()
        client = WireClient(broker.bootstrap)
        again = _beat(client, group, "m1", 1)
        assert (again.error_code, again.member_epoch, _assigned(again)) == (ErrorCode.NONE, 1, None)
        _min_isr(broker.bootstrap, SHARE_STATE, 1)

        def assigned() -> ShareGroupHeartbeatResponse | None:
            beat = _beat(client, group, "m1", again.member_epoch)
            return beat if _assigned(beat) else None

        done = eventually(assigned, "the partition initialized after the retry interval, then assigned")
        assert (done.member_epoch, _assigned(done)) == (2, [0])
        assert _stored(client, group, topic_id) is ErrorCode.NONE
        client.close()
    finally:
        broker.kill()


def test_a_failed_deletion_keeps_the_group_and_the_next_deletes_it(tmp_path: Path) -> None:
    """DeleteGroups while ``__consumer_offsets`` cannot be written answers the error and the group stays (it used to
    vanish from the coordinator while its records stayed, to come back after a restart); while the share coordinator
    cannot delete, the answer is its error, and after a crash the next DeleteGroups deletes the same state and the
    group, which a restart does not bring back."""
    broker = BrokerProcess(tmp_path, {"share.coordinator.write.timeout.ms": "1000"}).start()
    group, topic = "delete-group", "delete-topic"
    try:
        client = WireClient(broker.bootstrap)
        topic_id = _topic(client, topic)
        assert _assigned(_join(client, group, "m1", [topic])) == [0]
        _share_state_topic(client, group, topic_id)
        assert _fetch(client, group, "m1", 0, topic_id).responses[0].partitions[0].error_code == ErrorCode.NONE
        assert _beat(client, group, "m1", -1).error_code == ErrorCode.NONE
        assert _stored(client, group, topic_id) is ErrorCode.NONE

        def delete() -> ErrorCode:
            return ErrorCode(client.request(DeleteGroupsRequest(groups_names=[group]), 2,
                                            DeleteGroupsResponse).results[0].error_code)

        def listed() -> list[str]:
            return [g.group_id for g in client.request(ListGroupsRequest(types_filter=["share"]), 5,
                                                       ListGroupsResponse).groups]

        state = _read(client, group, topic_id)
        _min_isr(broker.bootstrap, OFFSETS, 2)
        assert delete() is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert listed() == [group] and _stored(client, group, topic_id) is ErrorCode.NONE
        _min_isr(broker.bootstrap, OFFSETS, 1)
        _join(client, group, "m2", [topic])  # the failed deletion was undone: the partition is not initialized again
        assert _beat(client, group, "m2", -1).error_code == ErrorCode.NONE
        assert _read(client, group, topic_id) == state
        _min_isr(broker.bootstrap, SHARE_STATE, 2)
        assert delete() is ErrorCode.COORDINATOR_NOT_AVAILABLE  # the share coordinator could not delete
        assert listed() == [group] and _stored(client, group, topic_id) is ErrorCode.NONE
        client.close()

        broker.kill()
        broker.start()
        client = WireClient(broker.bootstrap)
        eventually(lambda: listed() == [group], "the group loaded, still there")
        _min_isr(broker.bootstrap, SHARE_STATE, 1)
        assert delete() is ErrorCode.NONE
        assert listed() == [] and _stored(client, group, topic_id) is ErrorCode.INVALID_REQUEST
        client.close()

        broker.kill()
        broker.start()
        client = WireClient(broker.bootstrap)
        gone = eventually(lambda: _described(client, group) not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                                                    ErrorCode.NOT_COORDINATOR),
                          "the coordinator loaded")
        assert gone and _described(client, group) is ErrorCode.GROUP_ID_NOT_FOUND and listed() == []
        client.close()
    finally:
        broker.kill()


def _state_record(bootstrap: str, group: str) -> ShareGroupStatePartitionMetadataValue | None:
    """The group's last ShareGroupStatePartitionMetadata record in ``__consumer_offsets``, as a client reads it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lifecycle-reader", "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(OFFSETS, timeout=10).topics[OFFSETS].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(OFFSETS, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(OFFSETS, p, 0) for p in partitions])
        last, read = None, dict.fromkeys(partitions, 0)
        while any(read[p] < ends[p] for p in partitions):
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            read[message.partition()] = message.offset() + 1
            entry = decode_record(message.key(), message.value())
            if isinstance(entry, ShareGroupEntry) and entry.group_id == group \
                    and entry.key_version == STATE_PARTITION_METADATA:
                last = entry.value
        return last
    finally:
        consumer.close()


def test_a_deleted_topic_leaves_the_groups_share_partition_metadata(tmp_path: Path) -> None:
    """Kafka's maybeCleanupShareGroupState: deleting a topic removes it from the record of every share group that
    had state in it."""
    broker = BrokerProcess(tmp_path).start()
    group = "cleanup-group"
    try:
        client = WireClient(broker.bootstrap)
        kept, dropped = _topic(client, "cleanup-kept"), _topic(client, "cleanup-dropped")
        _join(client, group, "m1", ["cleanup-kept", "cleanup-dropped"])
        before = eventually(lambda: (r := _state_record(broker.bootstrap, group)) and len(r.initialized_topics) == 2
                            and r, "both topics initialized")
        assert {t.topic_id for t in before.initialized_topics} == {kept, dropped}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics(["cleanup-dropped"])["cleanup-dropped"].result(timeout=30)
        after = eventually(lambda: (r := _state_record(broker.bootstrap, group)) and len(r.initialized_topics) == 1
                           and r, "the deleted topic gone from the group's record")
        assert [(t.topic_id, t.topic_name, t.partitions) for t in after.initialized_topics] == \
            [(kept, "cleanup-kept", [0])]
        assert (after.initializing_topics, after.deleting_topics) == ([], [])
        client.close()
    finally:
        broker.kill()


def test_state_an_earlier_initialization_left_is_taken_as_initialized(tmp_path: Path) -> None:
    """An initialization whose outcome was never recorded (its coordinator crashed or moved after the share
    coordinator took it) is asked for again at a group epoch the share coordinator fences: the partition counts as
    initialized and is assigned, with the state as it is (not initialized again over it)."""
    broker = BrokerProcess(tmp_path).start()
    group, topic = "earlier-group", "earlier-topic"
    try:
        client = WireClient(broker.bootstrap)
        topic_id = _topic(client, topic)
        _share_state_topic(client, group, topic_id)
        R = InitializeShareGroupStateRequest
        answer = client.request(R(group_id=group, topics=[R.InitializeStateData(topic_id=topic_id, partitions=[
            R.PartitionData(partition=0, state_epoch=100, start_offset=-1)])]), 0, InitializeShareGroupStateResponse)
        assert answer.results[0].partitions[0].error_code == ErrorCode.NONE
        before = _read(client, group, topic_id)
        assert _assigned(_join(client, group, "m1", [topic])) == [0]
        assert _read(client, group, topic_id) == before and before.state_epoch == 100
        client.close()
    finally:
        broker.kill()
