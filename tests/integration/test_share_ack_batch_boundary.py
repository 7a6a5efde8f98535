"""A partition's acknowledgement batches where one starts at the previous batch's last offset, as Kafka takes them:
``KafkaApis.validateAcknowledgementBatches`` refuses a batch whose first offset is below the previous batch's last
offset (``batch.firstOffset < prevEndOffset``), so sharing that one offset is not INVALID_REQUEST. The batches then
reach the share-partition, which acknowledges them in order and stops at the first it refuses, rolling back those
before it (Kafka's ``SharePartition.acknowledge``: ``break`` at the first failure, then
``rollbackOrProcessStateUpdates`` undoes the whole call): the second batch names offset 1, accepted by the first,
so the partition is INVALID_RECORD_STATE and nothing is applied. Before, the first batch stayed applied."""

from __future__ import annotations

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_wire import ACCEPT, _acknowledge, _fetch, _held_by_m1

BATCHES = [(0, 1), (1, 2)]
"""The second batch starts at the first one's last offset."""


@pytest.mark.parametrize("api", ["ShareAcknowledge", "ShareFetch"])
def test_a_batch_starting_at_the_previous_last_offset_is_taken_then_refused_as_a_whole(shared_broker,
                                                                                       api: str) -> None:
    client = WireClient(shared_broker.bootstrap)
    topic, group = f"ack-boundary-{api}", f"ack-boundary-{api}-group"
    topic_id = _held_by_m1(client, topic, group)
    if api == "ShareAcknowledge":
        R = ShareAcknowledgeRequest
        answer = client.request(R(group_id=group, member_id="m1", share_session_epoch=2, topics=[R.AcknowledgeTopic(
            topic_id=topic_id, partitions=[R.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                R.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=[ACCEPT])
                for first, last in BATCHES])])]), 1, ShareAcknowledgeResponse)
        code = answer.responses[0].partitions[0].error_code
    else:
        B = ShareFetchRequest.AcknowledgementBatch
        fetched = _fetch(client, group, "m1", 2, topic_id, [B(first_offset=first, last_offset=last,
                                                              acknowledge_types=[ACCEPT]) for first, last in BATCHES])
        code = fetched.responses[0].partitions[0].acknowledge_error_code
    assert code == ErrorCode.INVALID_RECORD_STATE  # not INVALID_REQUEST: the batches passed the request's checks
    # nothing applied: m1 still holds all three records
    assert _acknowledge(client, group, "m1", 3, topic_id, 0, 2).responses[0].partitions[0].error_code == 0
    client.close()
