"""Share groups' bad input on the wire (KIP-932): Kafka's error codes, and the broker keeps serving.

Requests are written with pybroker's own codecs on a bare socket, so each test sends exactly the fields it means:
a stale member epoch, a stale or unknown share-session epoch, acknowledging records not held, a share request for
a classic group.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    ProduceRequest,
    ProduceResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from pybroker.records.record import RecordInput, build_batch
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient, metadata_ok

ACCEPT = 1
RELEASE = 2
RENEW = 4


def _topic(client: WireClient, name: str) -> uuid.UUID:
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1)]), 7, CreateTopicsResponse)
    assert created.topics[0].error_code == 0
    return created.topics[0].topic_id


def _produce(client: WireClient, topic: str, count: int) -> None:
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(
            index=0, records=build_batch([RecordInput(b"k", b"v%d" % i) for i in range(count)]))])])
    assert client.request(request, 9, ProduceResponse).responses[0].partition_responses[0].error_code == 0


def _beat(client: WireClient, group: str, member: str, epoch: int,
          topics: list[str] | None = None) -> ShareGroupHeartbeatResponse:
    """One heartbeat, retried while the group's coordinator partition is still loading (as clients retry)."""
    def answered() -> ShareGroupHeartbeatResponse | None:
        response = client.request(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                             subscribed_topic_names=topics),
                                  1, ShareGroupHeartbeatResponse)
        return None if response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else response

    return eventually(answered, f"{group}'s coordinator to be loaded")


def _join(client: WireClient, group: str, member: str, topics: list[str]) -> ShareGroupHeartbeatResponse:
    """Join with epoch 0, then heartbeat at the member's epoch until it is assigned partitions: they are assigned
    only once the group coordinator has had their state initialized, which a first heartbeat may not wait for."""
    joined = _beat(client, group, member, 0, topics)
    assert joined.error_code == ErrorCode.NONE, joined
    last = [joined]

    def assigned() -> ShareGroupHeartbeatResponse | None:
        if last[-1].assignment is not None and last[-1].assignment.topic_partitions:
            return last[-1]
        last.append(_beat(client, group, member, last[-1].member_epoch))
        return None

    return eventually(assigned, f"{member} of {group} to be assigned partitions")


def _fetch(client: WireClient, group: str, member: str, epoch: int, topic_id: uuid.UUID | None,
           acks: list[ShareFetchRequest.AcknowledgementBatch] | None = None) -> ShareFetchResponse:
    topics = [] if topic_id is None else [ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
        ShareFetchRequest.FetchPartition(partition_index=0, acknowledgement_batches=acks or [])])]
    return client.request(ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=epoch,
                                            max_wait_ms=0, min_bytes=1, max_records=100, topics=topics),
                          1, ShareFetchResponse)


def _acknowledge(client: WireClient, group: str, member: str, epoch: int, topic_id: uuid.UUID, first: int,
                 last: int, kind: int = ACCEPT) -> ShareAcknowledgeResponse:
    return client.request(ShareAcknowledgeRequest(group_id=group, member_id=member, share_session_epoch=epoch,
                                                  topics=[ShareAcknowledgeRequest.AcknowledgeTopic(
                                                      topic_id=topic_id, partitions=[
                                                          ShareAcknowledgeRequest.AcknowledgePartition(
                                                              partition_index=0, acknowledgement_batches=[
                                                                  ShareAcknowledgeRequest.AcknowledgementBatch(
                                                                      first_offset=first, last_offset=last,
                                                                      acknowledge_types=[kind])])])]),
                          1, ShareAcknowledgeResponse)


def _held_by_m1(client: WireClient, topic: str, group: str) -> uuid.UUID:
    """A new topic whose three records member m1 of ``group`` has acquired (at share session epoch 1); its id."""
    topic_id = _topic(client, topic)
    _join(client, group, "m1", [topic])
    assert _fetch(client, group, "m1", 0, topic_id).error_code == 0  # the share-partition starts at the end (latest)
    _produce(client, topic, 3)
    held = eventually(lambda: _fetch(client, group, "m1", 1, topic_id).responses, "records acquired")
    assert [(a.first_offset, a.last_offset) for a in held[0].partitions[0].acquired_records] == [(0, 2)]
    return topic_id


def _commit(client: WireClient, group: str, topic: str) -> int:
    """A simple (generation -1) OffsetCommit of offset 0 on partition 0, retried while the coordinator loads; its
    error code."""
    def answered() -> OffsetCommitResponse | None:
        response = client.request(OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="",
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]),
            8, OffsetCommitResponse)
        loading = response.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None if loading else response

    return eventually(answered, f"{group}'s coordinator to be loaded").topics[0].partitions[0].error_code


def test_a_stale_member_epoch_is_fenced(shared_broker) -> None:
    client = WireClient(shared_broker.bootstrap)
    _topic(client, "wire-fence")
    epoch = _join(client, "wire-fence-group", "m1", ["wire-fence"]).member_epoch  # 2: joined, then assigned
    assert _beat(client, "wire-fence-group", "m2", 0, ["wire-fence"]).member_epoch == epoch + 1
    fenced = _beat(client, "wire-fence-group", "m1", epoch + 1)
    assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert _beat(client, "wire-fence-group", "m1", epoch).member_epoch == epoch + 1  # its own epoch still works
    assert _beat(client, "wire-fence-group", "", 0, ["wire-fence"]).error_code == ErrorCode.INVALID_REQUEST
    client.close()
    assert metadata_ok(shared_broker.bootstrap)


def test_share_session_epochs_and_records_not_held(shared_broker) -> None:
    client = WireClient(shared_broker.bootstrap)
    topic_id = _topic(client, "wire-session")
    _produce(client, "wire-session", 5)
    group = "wire-session-group"
    _join(client, group, "m2", ["wire-session"])
    assert _fetch(client, group, "m1", 0, topic_id).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # not a member yet
    _join(client, group, "m1", ["wire-session"])
    first = _fetch(client, group, "m1", 0, topic_id)  # share.auto.offset.reset=latest: nothing before the start
    assert first.error_code == 0 and first.responses[0].partitions[0].acquired_records == []
    _produce(client, "wire-session", 3)
    fetched = _fetch(client, group, "m1", 1, topic_id)
    [acquired] = fetched.responses[0].partitions[0].acquired_records
    assert (acquired.first_offset, acquired.last_offset, acquired.delivery_count) == (5, 7, 1)
    assert _fetch(client, group, "m1", 1, topic_id).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert _fetch(client, group, "m2", 4, topic_id).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert _fetch(client, group, "m2", 0, topic_id).responses[0].partitions[0].acquired_records == []  # m1 holds them
    refused = _acknowledge(client, group, "m2", 1, topic_id, 5, 7)  # m2 does not hold them
    assert refused.error_code == 0 and refused.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    outside = _acknowledge(client, group, "m1", 2, topic_id, 0, 4)  # before the share-partition's start
    assert outside.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    piggybacked = _fetch(client, group, "m1", 3, topic_id, [ShareFetchRequest.AcknowledgementBatch(
        first_offset=5, last_offset=7, acknowledge_types=[ACCEPT])])
    assert piggybacked.responses[0].partitions[0].acknowledge_error_code == 0
    again = _acknowledge(client, group, "m1", 4, topic_id, 5, 7)  # accepted already
    assert again.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    assert _acknowledge(client, group, "m1", 0, topic_id, 5, 7).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    client.close()
    assert metadata_ok(shared_broker.bootstrap)


def test_share_requests_for_a_classic_group(shared_broker) -> None:
    client = WireClient(shared_broker.bootstrap)
    topic_id = _topic(client, "wire-classic")
    assert _commit(client, "wire-classic-group", "wire-classic") == 0
    assert _beat(client, "wire-classic-group", "m1", 0, ["wire-classic"]).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert _fetch(client, "wire-classic-group", "m1", 0, topic_id).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    client.close()


def test_classic_requests_for_a_share_group(shared_broker) -> None:
    client = WireClient(shared_broker.bootstrap)
    _topic(client, "wire-share-only")
    epoch = _join(client, "wire-share-only-group", "m1", ["wire-share-only"]).member_epoch
    assert _commit(client, "wire-share-only-group", "wire-share-only") == ErrorCode.GROUP_ID_NOT_FOUND
    assert _beat(client, "wire-share-only-group", "m1", epoch).member_epoch == epoch  # still a share group
    client.close()


def test_v2_record_limit_and_renew(shared_broker) -> None:
    client = WireClient(shared_broker.bootstrap)
    topic_id = _topic(client, "wire-v2")
    group = "wire-v2-group"
    _join(client, group, "m1", ["wire-v2"])
    _fetch(client, group, "m1", 0, topic_id)  # the share-partition starts at the end (latest)
    _produce(client, "wire-v2", 10)

    def fetch_v2(epoch: int, **fields) -> ShareFetchResponse:
        return client.request(ShareFetchRequest(group_id=group, member_id="m1", share_session_epoch=epoch,
                                                topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                                                    ShareFetchRequest.FetchPartition(partition_index=0, **fields.pop(
                                                        "partition", {}))])], **fields), 2, ShareFetchResponse)

    limited = fetch_v2(1, max_wait_ms=0, min_bytes=1, max_records=4, share_acquire_mode=1)
    [acquired] = limited.responses[0].partitions[0].acquired_records
    assert (acquired.first_offset, acquired.last_offset) == (0, 3)  # a batch of 10 split at 4 records
    renew = [ShareFetchRequest.AcknowledgementBatch(first_offset=0, last_offset=3, acknowledge_types=[4])]
    refused = fetch_v2(2, max_wait_ms=100, max_records=1, is_renew_ack=True, partition={"acknowledgement_batches": renew})
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    renewed = fetch_v2(2, max_bytes=0, is_renew_ack=True, partition={"acknowledgement_batches": renew})
    assert renewed.error_code == 0 and renewed.responses[0].partitions[0].acknowledge_error_code == 0
    assert renewed.responses[0].partitions[0].acquired_records == []  # a renewal fetches nothing
    in_v1 = _fetch(client, group, "m1", 3, topic_id, renew)
    assert in_v1.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_REQUEST
    client.close()


def test_a_failed_state_write_rolls_the_acknowledgement_back(shared_broker) -> None:
    """The share coordinator refuses the write of an acknowledgement (here: the share-partition's state was deleted
    under the leader, so the write is INVALID_REQUEST): the acknowledgement is answered with that error and undone,
    as Kafka's SharePartition rolls back; the records are still the member's. When it leaves, the write of their
    release is refused too, and the release is rolled back as well (Kafka's rollbackOrProcessStateUpdates): they are
    redelivered once its lock runs out (a lock timeout goes on whatever its write's outcome, as Kafka's)."""
    from pybroker.protocol.messages import DeleteShareGroupStateRequest, DeleteShareGroupStateResponse
    from tests.integration.test_share_group_configs_durable import alter_group

    client = WireClient(shared_broker.bootstrap)
    topic, group = "wire-rollback", "wire-rollback-group"
    lock_s = 15  # group.share.min.record.lock.duration.ms's default: m1's lock runs out soonest
    assert alter_group(client, group, {"share.record.lock.duration.ms": str(lock_s * 1000)}) == ErrorCode.NONE
    topic_id = _held_by_m1(client, topic, group)
    R = DeleteShareGroupStateRequest
    deleted = client.request(R(group_id=group, topics=[R.DeleteStateData(topic_id=topic_id, partitions=[
        R.PartitionData(partition=0)])]), 0, DeleteShareGroupStateResponse)
    assert deleted.results[0].partitions[0].error_code == 0
    refused = _acknowledge(client, group, "m1", 2, topic_id, 0, 2).responses[0].partitions[0]
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    again = _acknowledge(client, group, "m1", 3, topic_id, 0, 2).responses[0].partitions[0]
    assert again.error_code == ErrorCode.INVALID_REQUEST  # still held: not INVALID_RECORD_STATE
    _join(client, group, "m2", [topic])
    assert _fetch(client, group, "m2", 0, topic_id).responses[0].partitions[0].acquired_records == []  # all held
    _beat(client, group, "m1", -1)  # m1 leaves: its release is written, refused and rolled back
    epochs = iter(range(1, 1000))  # m2's open session keeps this copy of the share-partition in use
    redelivered = eventually(lambda: [a for t in _fetch(client, group, "m2", next(epochs), topic_id).responses
                                      for p in t.partitions for a in p.acquired_records],
                             "the records redelivered once m1's lock ran out", timeout=lock_s + 30)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in redelivered] == [(0, 2, 2)]
    client.close()
    assert metadata_ok(shared_broker.bootstrap)


def test_a_release_wakes_a_share_fetch_waiting_for_records(shared_broker) -> None:
    """m2 long-polls (max_wait_ms a minute, past the socket's 10 s timeout) while m1 holds every record; m1's
    release is answered after its write, and the write wakes m2's fetch, which acquires them at once (it waited
    out its whole max_wait_ms before: only appends woke it)."""
    client, waiting = WireClient(shared_broker.bootstrap), WireClient(shared_broker.bootstrap)
    topic, group = "wire-wake", "wire-wake-group"
    topic_id = _held_by_m1(client, topic, group)
    _join(waiting, group, "m2", [topic])
    assert _fetch(waiting, group, "m2", 0, topic_id).responses[0].partitions[0].acquired_records == []  # all held
    long_poll = ShareFetchRequest(group_id=group, member_id="m2", share_session_epoch=1, max_wait_ms=60_000,
                                  min_bytes=1, max_records=100, topics=[])
    with ThreadPoolExecutor(1) as pool:
        fetched = pool.submit(waiting.request, long_poll, 1, ShareFetchResponse)
        released = _acknowledge(client, group, "m1", 2, topic_id, 0, 2, RELEASE).responses[0].partitions[0]
        assert released.error_code == ErrorCode.NONE
        answer = fetched.result()
    [acquired] = answer.responses[0].partitions[0].acquired_records
    assert (acquired.first_offset, acquired.last_offset, acquired.delivery_count) == (0, 2, 2)
    client.close()
    waiting.close()
    assert metadata_ok(shared_broker.bootstrap)


def test_a_partition_named_twice_is_acknowledged_once_with_its_last_batches(shared_broker) -> None:
    """A ShareAcknowledge naming the partition twice (ACCEPT, then RELEASE) and a ShareFetch doing the same in its
    piggybacked acknowledgements: Kafka's KafkaApis collects the batches into a map by partition, so the last ones
    are applied and the partition is answered once; the records are released (redelivered), not accepted. The
    ShareFetch waits for records: its fetch runs while its acknowledgement is written, and records it released
    become acquirable only once that write is done (Kafka's ongoing state transition), which ends the wait."""
    client = WireClient(shared_broker.bootstrap)
    topic, group = "wire-twice", "wire-twice-group"
    topic_id = _held_by_m1(client, topic, group)
    P, B = ShareAcknowledgeRequest.AcknowledgePartition, ShareAcknowledgeRequest.AcknowledgementBatch
    twice = client.request(ShareAcknowledgeRequest(group_id=group, member_id="m1", share_session_epoch=2, topics=[
        ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=topic_id, partitions=[
            P(partition_index=0, acknowledgement_batches=[B(first_offset=0, last_offset=2, acknowledge_types=[kind])])
            for kind in (ACCEPT, RELEASE)])]), 1, ShareAcknowledgeResponse)
    assert [[(p.partition_index, p.error_code) for p in t.partitions] for t in twice.responses] == [[(0, 0)]]
    redelivered = _fetch(client, group, "m1", 3, topic_id).responses[0].partitions[0].acquired_records
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in redelivered] == [(0, 2, 2)]
    FP, FB = ShareFetchRequest.FetchPartition, ShareFetchRequest.AcknowledgementBatch
    piggybacked = client.request(ShareFetchRequest(
        group_id=group, member_id="m1", share_session_epoch=4, max_wait_ms=15_000, min_bytes=1, max_records=100,
        topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
            FP(partition_index=0, acknowledgement_batches=[FB(first_offset=0, last_offset=2, acknowledge_types=[kind])])
            for kind in (ACCEPT, RELEASE)])]), 1, ShareFetchResponse)
    [[answer]] = [t.partitions for t in piggybacked.responses]
    assert answer.acknowledge_error_code == 0
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in answer.acquired_records] == [(0, 2, 3)]
    client.close()
    assert metadata_ok(shared_broker.bootstrap)


INVALID_BATCHES = {  # each after a valid first batch, which must not be applied either
    "out of order": [(1, 2, [ACCEPT]), (0, 0, [ACCEPT])],
    "overlapping": [(0, 1, [ACCEPT]), (0, 2, [ACCEPT])],
    "last offset below the first": [(0, 0, [ACCEPT]), (2, 1, [ACCEPT])],
    "no acknowledge type": [(0, 0, [ACCEPT]), (1, 2, [])],
    "types not one per offset": [(0, 0, [ACCEPT]), (1, 2, [ACCEPT, ACCEPT, ACCEPT])],
    "unknown acknowledge type": [(0, 0, [ACCEPT]), (1, 2, [5])],
    "RENEW without IsRenewAck": [(0, 0, [ACCEPT]), (1, 2, [RENEW])],
}


@pytest.mark.parametrize("case", list(INVALID_BATCHES))
def test_invalid_acknowledgement_batches_refuse_the_partition(shared_broker, case: str) -> None:
    """A ShareAcknowledge (v2, IsRenewAck false) whose batches Kafka's KafkaApis.validateAcknowledgementBatches
    refuses: the partition is INVALID_REQUEST and none of its batches is applied (m1 still holds all three records,
    so accepting them afterwards succeeds). Before, the batches were applied one by one until one was refused."""
    client = WireClient(shared_broker.bootstrap)
    index = list(INVALID_BATCHES).index(case)
    topic, group = f"wire-invalid-{index}", f"wire-invalid-{index}-group"
    topic_id = _held_by_m1(client, topic, group)
    R = ShareAcknowledgeRequest
    refused = client.request(R(group_id=group, member_id="m1", share_session_epoch=2, topics=[R.AcknowledgeTopic(
        topic_id=topic_id, partitions=[R.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
            R.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=types)
            for first, last, types in INVALID_BATCHES[case]])])]), 2, ShareAcknowledgeResponse)
    assert refused.error_code == 0 and refused.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    assert _acknowledge(client, group, "m1", 3, topic_id, 0, 2).responses[0].partitions[0].error_code == 0
    client.close()


def test_invalid_acknowledgement_batches_in_a_share_fetch(shared_broker) -> None:
    """The same validation of a ShareFetch's acknowledgements: overlapping batches are INVALID_REQUEST for the
    partition, the first batch not applied (before, it was: the records 0-1 were accepted)."""
    client = WireClient(shared_broker.bootstrap)
    topic, group = "wire-invalid-fetch", "wire-invalid-fetch-group"
    topic_id = _held_by_m1(client, topic, group)
    B = ShareFetchRequest.AcknowledgementBatch
    answer = _fetch(client, group, "m1", 2, topic_id, [B(first_offset=0, last_offset=1, acknowledge_types=[ACCEPT]),
                                                      B(first_offset=0, last_offset=2, acknowledge_types=[ACCEPT])])
    assert answer.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_REQUEST
    assert _acknowledge(client, group, "m1", 3, topic_id, 0, 2).responses[0].partitions[0].error_code == 0
    client.close()
