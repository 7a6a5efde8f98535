"""Transactions V2 (KIP-890 part 2) and the V1 partition verification (part 1), on the wire as the Java 4.x
producer speaks them: Produce v12+ adds its partition to the transaction, EndTxn v5 bumps the epoch and answers it,
a V1 client's transactional write to a partition it did not add is TRANSACTION_ABORTABLE (INVALID_TXN_STATE
before Produce v11), and Produce v13 names topics by id (UNKNOWN_TOPIC_ID for an id no topic has). read_committed
sees exactly the committed transactions."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from pybroker.records import build_batch
from pybroker.controller.metadata import BrokerInfo
from pybroker.coordinator.records import partition_for
from pybroker.coordinator.txn_coordinator import MarkerRequest
from pybroker.coordinator.txn_records import TV_2
from pybroker.server.txn_markers import MarkerChannel
from tests.integration.broker_process import BrokerProcess
from tests.eventually import eventually
from tests.integration.groups_common import create_topic
from tests.integration.test_bad_input import WireClient

TOPIC = "txn-v2"


@pytest.fixture(scope="module")
def broker(shared_broker: BrokerProcess) -> BrokerProcess:
    create_topic(shared_broker.bootstrap, TOPIC, partitions=2)
    return shared_broker


def init_producer(client: WireClient, transactional_id: str) -> tuple[int, int]:
    """InitProducerId, retried while the coordinator creates and loads __transaction_state."""
    def attempt() -> InitProducerIdResponse | None:
        answer = client.request(InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60000,
                                                      producer_id=-1, producer_epoch=-1), 5, InitProducerIdResponse)
        return answer if answer.error_code == ErrorCode.NONE else None

    answer = eventually(attempt, f"InitProducerId of {transactional_id}")
    return answer.producer_id, answer.producer_epoch


def produce(client: WireClient, version: int, transactional_id: str | None, value: bytes, *, producer: tuple[int, int],
            sequence: int, partition: int = 0, topic_id: uuid.UUID | None = None
            ) -> ProduceResponse.PartitionProduceResponse:
    batch = build_batch([(None, value)], producer_id=producer[0], producer_epoch=producer[1], base_sequence=sequence,
                        is_transactional=transactional_id is not None)
    data = ProduceRequest.TopicProduceData(name=TOPIC, topic_id=topic_id or uuid.UUID(int=0), partition_data=[
        ProduceRequest.PartitionProduceData(index=partition, records=batch)])
    answer = client.request(ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=10000,
                                           topic_data=[data]), version, ProduceResponse)
    [topic] = answer.responses
    [result] = topic.partition_responses
    return result


def end_txn(client: WireClient, transactional_id: str, producer: tuple[int, int], commit: bool,
            version: int = 5) -> EndTxnResponse:
    return client.request(EndTxnRequest(transactional_id=transactional_id, producer_id=producer[0],
                                        producer_epoch=producer[1], committed=commit), version, EndTxnResponse)


def state_of(client: WireClient, transactional_id: str) -> str:
    return client.request(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0,
                          DescribeTransactionsResponse).transaction_states[0].transaction_state


def state_log_end(client: WireClient, transactional_id: str) -> int:
    """The high watermark of the transactional id's partition of __transaction_state (50 partitions)."""
    wanted = ListOffsetsRequest.ListOffsetsPartition(partition_index=partition_for(transactional_id, 50), timestamp=-1)
    answer = client.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name="__transaction_state", partitions=[wanted])]), 7, ListOffsetsResponse)
    [found] = answer.topics[0].partitions
    assert found.error_code == ErrorCode.NONE, ErrorCode(found.error_code).name
    return found.offset


def committed_offset(client: WireClient, group: str, topic: str = TOPIC) -> int | None:
    """The group's committed offset of the topic's partition 0; None while there is none (the commit marker of a
    transaction's offsets lands after its EndTxn is answered)."""
    answer = client.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])]),
        8, OffsetFetchResponse).groups[0]
    [offset] = [p.committed_offset for t in answer.topics for p in t.partitions]
    return offset if offset >= 0 else None


def committed_values(bootstrap: str, partition: int = 0, topic: str = TOPIC) -> list[bytes]:
    """What a read_committed consumer reads up to the high watermark the partition had when the read began: a
    transaction whose EndTxn was answered may hold the last stable offset back until its marker is written (as
    in Kafka), so an end of partition below that is waited past."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1]
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition within 10 s"
            if message.error():
                assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                if message.offset() >= high:
                    return values
                continue
            values.append(message.value())
    finally:
        consumer.close()


def test_v2_produce_adds_the_partition_and_end_txn_v5_bumps_the_epoch(broker: BrokerProcess) -> None:
    client = WireClient(broker.bootstrap)
    try:
        producer = init_producer(client, "v2-app")
        assert produce(client, 12, "v2-app", b"committed", producer=producer, sequence=0).error_code == ErrorCode.NONE
        described = client.request(DescribeTransactionsRequest(transactional_ids=["v2-app"]), 0,
                                   DescribeTransactionsResponse).transaction_states[0]
        assert (described.transaction_state, [(t.topic, t.partitions) for t in described.topics]) == (
            "Ongoing", [(TOPIC, [0])])
        ended = end_txn(client, "v2-app", producer, commit=True)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, producer[0], producer[1] + 1)
        eventually(lambda: state_of(client, "v2-app") == "CompleteCommit", "the commit to complete")
        retried = end_txn(client, "v2-app", producer, commit=True)  # the answer was lost: the same one again
        assert (retried.error_code, retried.producer_epoch) == (0, producer[1] + 1)
        # a late write of the ended transaction is fenced; the next one runs at the new epoch from sequence 0
        late = produce(client, 12, "v2-app", b"late", producer=producer, sequence=1)
        assert late.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        bumped = (producer[0], producer[1] + 1)
        assert produce(client, 12, "v2-app", b"aborted", producer=bumped, sequence=0).error_code == ErrorCode.NONE
        aborted = end_txn(client, "v2-app", bumped, commit=False)
        assert (aborted.error_code, aborted.producer_epoch) == (0, producer[1] + 2)
        # until then its EndTxn, stale or not, is CONCURRENT_TRANSACTIONS (Kafka's pending CompleteAbort)
        eventually(lambda: state_of(client, "v2-app") == "CompleteAbort", "the abort to complete")
        stale = end_txn(client, "v2-app", producer, commit=False)
        assert stale.error_code == ErrorCode.PRODUCER_FENCED
    finally:
        client.close()
    assert committed_values(broker.bootstrap) == [b"committed"]


def test_a_v2_abort_with_nothing_open_ends_an_empty_transaction_with_the_bumped_epoch(broker: BrokerProcess) -> None:
    """Kafka 4.x (KIP-890): PrepareAbort with the bumped epoch and no partitions, then CompleteAbort; the
    coordinator used to write CompleteAbort at once."""
    client = WireClient(broker.bootstrap)
    try:
        producer = init_producer(client, "v2-empty-abort")
        before = state_log_end(client, "v2-empty-abort")
        aborted = end_txn(client, "v2-empty-abort", producer, commit=False)
        assert (aborted.error_code, aborted.producer_id, aborted.producer_epoch) == (0, producer[0], producer[1] + 1)
        eventually(lambda: state_of(client, "v2-empty-abort") == "CompleteAbort", "the empty abort to complete")
        assert state_log_end(client, "v2-empty-abort") == before + 2  # PrepareAbort, CompleteAbort
        again = end_txn(client, "v2-empty-abort", producer, commit=False)  # the answer was lost
        assert (again.error_code, again.producer_epoch) == (0, producer[1] + 1)
        commit = end_txn(client, "v2-empty-abort", (producer[0], producer[1] + 1), commit=True)
        assert commit.error_code == ErrorCode.INVALID_TXN_STATE
    finally:
        client.close()


def test_v1_transactional_produce_to_a_partition_not_added_is_refused_in_the_clients_terms(
        broker: BrokerProcess) -> None:
    """KIP-890: Kafka's coordinator answers the verification TRANSACTION_ABORTABLE; a Produce v11+ client gets it,
    an older one INVALID_TXN_STATE (AddPartitionsToTxnManager's DEFAULT_ERROR)."""
    client = WireClient(broker.bootstrap)
    try:
        producer = init_producer(client, "v1-app")
        old = produce(client, 10, "v1-app", b"hanging", producer=producer, sequence=0, partition=1)
        assert old.error_code == ErrorCode.INVALID_TXN_STATE
        refused = produce(client, 11, "v1-app", b"hanging", producer=producer, sequence=0, partition=1)
        assert refused.error_code == ErrorCode.TRANSACTION_ABORTABLE
        add = AddPartitionsToTxnRequest(v3_and_below_transactional_id="v1-app", v3_and_below_producer_id=producer[0],
                                        v3_and_below_producer_epoch=producer[1], v3_and_below_topics=[
                                            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TOPIC,
                                                                                              partitions=[1])])
        added = client.request(add, 3, AddPartitionsToTxnResponse)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        accepted = produce(client, 11, "v1-app", b"v1-committed", producer=producer, sequence=0, partition=1)
        assert accepted.error_code == ErrorCode.NONE
        assert end_txn(client, "v1-app", producer, commit=True, version=4).error_code == ErrorCode.NONE
    finally:
        client.close()
    assert committed_values(broker.bootstrap, partition=1) == [b"v1-committed"]


def test_v1_txn_offset_commit_without_add_offsets_is_refused_in_the_clients_terms(broker: BrokerProcess) -> None:
    """KIP-890 part 1 for offsets: a V1 client's TxnOffsetCommit is verified like its Produce, so offsets of a
    transaction that never added the group's __consumer_offsets partition are refused: TRANSACTION_ABORTABLE from
    v4, INVALID_TXN_STATE before; after AddOffsetsToTxn they are written and committed with the transaction."""
    client = WireClient(broker.bootstrap)
    group = "v1-offsets-group"
    try:
        producer = init_producer(client, "v1-offsets")

        def commit_offsets(version: int) -> list[int] | None:
            answer = client.request(TxnOffsetCommitRequest(
                transactional_id="v1-offsets", group_id=group, producer_id=producer[0], producer_epoch=producer[1],
                topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]),
                version, TxnOffsetCommitResponse)
            codes = [p.error_code for t in answer.topics for p in t.partitions]
            loading = codes in ([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS], [ErrorCode.NOT_COORDINATOR])
            return None if loading else codes

        assert eventually(lambda: commit_offsets(3), "the group coordinator") == [ErrorCode.INVALID_TXN_STATE]
        assert commit_offsets(4) == [ErrorCode.TRANSACTION_ABORTABLE]
        added = client.request(AddOffsetsToTxnRequest(transactional_id="v1-offsets", producer_id=producer[0],
                                                      producer_epoch=producer[1], group_id=group), 3,
                               AddOffsetsToTxnResponse)
        assert added.error_code == ErrorCode.NONE
        assert commit_offsets(4) == [ErrorCode.NONE]
        assert end_txn(client, "v1-offsets", producer, commit=True, version=4).error_code == ErrorCode.NONE
        assert eventually(lambda: committed_offset(client, group), "the transaction's offsets") == 5
    finally:
        client.close()


def test_produce_v13_names_topics_by_id(broker: BrokerProcess) -> None:
    client = WireClient(broker.bootstrap)
    try:
        metadata = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12,
                                  MetadataResponse)
        topic_id = metadata.topics[0].topic_id
        unknown = produce(client, 13, None, b"nowhere", producer=(-1, -1), sequence=-1, topic_id=uuid.uuid4())
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_ID
        known = produce(client, 13, None, b"by-id", producer=(-1, -1), sequence=-1, topic_id=topic_id, partition=1)
        assert (known.error_code, known.base_offset >= 0) == (ErrorCode.NONE, True)
    finally:
        client.close()


def test_a_downgrade_of_transaction_version_leaves_an_open_v2_transaction_to_end_as_v2(broker: BrokerProcess) -> None:
    """The coordinator keeps each transaction's protocol: a V2 transaction open across a downgrade still ends with
    EndTxn v5 (clients read the new level on their next ApiVersions), and nothing is left open."""
    client = WireClient(broker.bootstrap)
    try:
        producer = init_producer(client, "v2-downgrade")
        assert produce(client, 12, "v2-downgrade", b"across-downgrade", producer=producer, sequence=0,
                       partition=1).error_code == ErrorCode.NONE
        downgrade = UpdateFeaturesRequest(feature_updates=[UpdateFeaturesRequest.FeatureUpdateKey(
            feature="transaction.version", max_version_level=1, upgrade_type=2)])
        assert client.request(downgrade, 1, UpdateFeaturesResponse).results[0].error_code == ErrorCode.NONE
        ended = end_txn(client, "v2-downgrade", producer, commit=True)
        assert (ended.error_code, ended.producer_epoch) == (0, producer[1] + 1)
        upgrade = UpdateFeaturesRequest(feature_updates=[UpdateFeaturesRequest.FeatureUpdateKey(
            feature="transaction.version", max_version_level=2, upgrade_type=1)])
        assert client.request(upgrade, 1, UpdateFeaturesResponse).results[0].error_code == ErrorCode.NONE
        eventually(lambda: state_of(client, "v2-downgrade") == "CompleteCommit", "the commit to complete")
    finally:
        client.close()
    assert b"across-downgrade" in committed_values(broker.bootstrap, partition=1)


def producer_state(client: WireClient, topic: str, partition: int, producer_id: int
                   ) -> DescribeProducersResponse.ProducerState:
    """What the leader of ``topic``-``partition`` holds of ``producer_id`` (DescribeProducers)."""
    answer = client.request(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name=topic, partition_indexes=[partition])]), 0, DescribeProducersResponse)
    [state] = [s for s in answer.topics[0].partitions[0].active_producers if s.producer_id == producer_id]
    return state


def marker_written(client: WireClient, topic: str, partition: int, producer: tuple[int, int]
                   ) -> DescribeProducersResponse.ProducerState:
    """Wait until the leader holds ``producer`` (id, epoch) with no transaction open: its marker is written."""
    def written() -> DescribeProducersResponse.ProducerState | None:
        state = producer_state(client, topic, partition, producer[0])
        return state if (state.producer_epoch, state.current_txn_start_offset) == (producer[1], -1) else None

    state = eventually(written, f"the marker of producer {producer} on {topic}-{partition}")
    assert state is not None
    return state


def write_marker(client: WireClient, topic: str, partition: int, producer: tuple[int, int], coordinator_epoch: int,
                 *, commit: bool, transaction_version: int = TV_2) -> int:
    """WriteTxnMarkers v2 as a coordinator sends it: the error code of the one partition."""
    request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer[0], producer_epoch=producer[1], transaction_result=commit,
        coordinator_epoch=coordinator_epoch, transaction_version=transaction_version,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])])])
    answer = client.request(request, 2, WriteTxnMarkersResponse)
    return answer.markers[0].topics[0].partitions[0].error_code


def send_marker(broker: BrokerProcess, marker: MarkerRequest) -> ErrorCode:
    """``marker`` sent as the coordinator's marker channel sends it to another broker: its one partition's code."""
    host, port = broker.bootstrap.split(":")

    async def send() -> dict[tuple[str, int], ErrorCode]:
        channel = MarkerChannel(timeout_ms=10000)
        try:
            return await channel.send(BrokerInfo(1, host, int(port)), marker, list(marker.partitions))
        finally:
            await channel.close()

    [code] = asyncio.run(send()).values()
    return code


def test_a_late_v2_marker_at_the_open_transactions_epoch_is_refused_and_closes_nothing(broker: BrokerProcess) -> None:
    """KIP-1228 on the wire: a V2 transaction's markers carry the bumped epoch, at which the producer then runs its
    next transaction; a marker of the ended transaction arriving late (WriteTxnMarkers v2, TransactionVersion 2, at
    that same epoch) is INVALID_PRODUCER_EPOCH and leaves the open transaction open, to end as its producer says."""
    client = WireClient(broker.bootstrap)
    try:
        producer = init_producer(client, "v2-late-marker")
        assert produce(client, 12, "v2-late-marker", b"before-late-marker", producer=producer,
                       sequence=0).error_code == ErrorCode.NONE
        assert end_txn(client, "v2-late-marker", producer, commit=True).error_code == ErrorCode.NONE
        bumped = (producer[0], producer[1] + 1)
        written = marker_written(client, TOPIC, 0, bumped)  # the commit marker, at the bumped epoch
        # the next transaction's add waits for the CompleteCommit record (a producer retries meanwhile)
        eventually(lambda: state_of(client, "v2-late-marker") == "CompleteCommit", "the commit to complete")
        assert produce(client, 12, "v2-late-marker", b"open-at-late-marker", producer=bumped,
                       sequence=0).error_code == ErrorCode.NONE
        open_at = producer_state(client, TOPIC, 0, producer[0]).current_txn_start_offset
        assert open_at >= 0
        late = MarkerRequest("v2-late-marker", bumped[0], bumped[1], written.coordinator_epoch, True, ((TOPIC, 0),),
                             transaction_version=TV_2)
        assert send_marker(broker, late) == ErrorCode.INVALID_PRODUCER_EPOCH  # as a coordinator sends it
        assert write_marker(client, TOPIC, 0, bumped, written.coordinator_epoch, commit=False) \
            == ErrorCode.INVALID_PRODUCER_EPOCH
        assert producer_state(client, TOPIC, 0, producer[0]).current_txn_start_offset == open_at  # still open
        assert end_txn(client, "v2-late-marker", bumped, commit=False).error_code == ErrorCode.NONE
    finally:
        client.close()
    values = committed_values(broker.bootstrap)
    assert b"before-late-marker" in values and b"open-at-late-marker" not in values
