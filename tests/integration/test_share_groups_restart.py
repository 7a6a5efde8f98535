"""A share group itself survives a broker restart: its records in ``__consumer_offsets`` (Kafka 4.2's ShareGroup*
schemas) are replayed when the coordinator loads its partition, so the group keeps its epochs, its members (until
their session times out) with their assignment, and the share-partitions it has state in, which DeleteGroups after
the restart deletes from the share coordinator."""

from __future__ import annotations

import uuid
from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_wire import _beat, _join

TOPIC, GROUP, PARTITIONS = "share-restart", "share-restart-group", 3


def _stored(client: WireClient, topic_id: uuid.UUID, partition: int) -> bool:
    """Whether the share coordinator holds the group's state of the share-partition."""
    R = ReadShareGroupStateRequest
    found = client.request(R(group_id=GROUP, topics=[R.ReadStateData(topic_id=topic_id, partitions=[
        R.PartitionData(partition=partition, leader_epoch=-1)])]), 0, ReadShareGroupStateResponse)
    return found.results[0].partitions[0].error_code == ErrorCode.NONE


def _describe(client: WireClient) -> ShareGroupDescribeResponse.DescribedGroup | None:
    described = client.request(ShareGroupDescribeRequest(group_ids=[GROUP]), 1,
                               ShareGroupDescribeResponse).groups[0]
    return None if described.error_code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR) \
        else described


def _summary(group: ShareGroupDescribeResponse.DescribedGroup) -> tuple[object, ...]:
    return (group.error_code, group.group_epoch, group.assignment_epoch,
            sorted((m.member_id, m.member_epoch, sorted((t.topic_name, tuple(t.partitions))
                                                        for t in m.assignment.topic_partitions))
                   for m in group.members))


def test_a_share_group_survives_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path).start()
    try:
        client = WireClient(broker.bootstrap)
        created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=TOPIC, num_partitions=PARTITIONS, replication_factor=1)]), 7, CreateTopicsResponse)
        topic_id = created.topics[0].topic_id
        joined = _join(client, GROUP, "stays", [TOPIC])
        assert joined.error_code == ErrorCode.NONE
        _beat(client, GROUP, "goes", 0, [TOPIC])
        assert _beat(client, GROUP, "goes", -1).error_code == ErrorCode.NONE
        member_epoch = _beat(client, GROUP, "stays", joined.member_epoch).member_epoch

        fetch = ShareFetchRequest(group_id=GROUP, member_id="stays", share_session_epoch=0, max_wait_ms=0,
                                  min_bytes=1, max_records=100, topics=[ShareFetchRequest.FetchTopic(
                                      topic_id=topic_id, partitions=[ShareFetchRequest.FetchPartition(partition_index=p)
                                                                     for p in range(PARTITIONS)])])
        assert client.request(fetch, 1, ShareFetchResponse).error_code == ErrorCode.NONE
        eventually(lambda: all(_stored(client, topic_id, p) for p in range(PARTITIONS)),
                   "every share-partition initialized")
        before = eventually(lambda: _describe(client), "the group described")
        assert _summary(before) == (ErrorCode.NONE, joined.member_epoch + 2, joined.member_epoch + 2,  # join, leave
                                    [("stays", member_epoch, [(TOPIC, (0, 1, 2))])])
        client.close()

        broker.stop()
        broker.start()
        client = WireClient(broker.bootstrap)
        after = eventually(lambda: _describe(client), "the group loaded")
        assert _summary(after) == _summary(before)
        listed = client.request(ListGroupsRequest(types_filter=["share"]), 5, ListGroupsResponse).groups
        assert [(g.group_id, g.group_state) for g in listed] == [(GROUP, "Stable")]

        again = _beat(client, GROUP, "stays", member_epoch)  # the restored member goes on where it was
        assert (again.error_code, again.member_epoch, again.assignment) == (ErrorCode.NONE, member_epoch, None)
        assert _beat(client, GROUP, "stays", -1).error_code == ErrorCode.NONE
        deleted = client.request(DeleteGroupsRequest(groups_names=[GROUP]), 2, DeleteGroupsResponse)
        assert deleted.results[0].error_code == ErrorCode.NONE
        assert [_stored(client, topic_id, p) for p in range(PARTITIONS)] == [False] * PARTITIONS
        client.close()

        broker.stop()
        broker.start()
        client = WireClient(broker.bootstrap)
        gone = eventually(lambda: _describe(client), "the coordinator loaded")
        assert gone.error_code == ErrorCode.GROUP_ID_NOT_FOUND  # the tombstones are replayed too
        client.close()
    finally:
        broker.kill()
