"""A transactional producer driven to the last producer epoch (32767, Short.MAX_VALUE) on a real broker, on the
wire, under both transaction versions. The epochs are spent with InitProducerId at the current id and epoch (each
one bump, as Kafka's prepareIncrementProducerEpoch), which reaches the limit in seconds.

What Kafka does there (TransactionCoordinator, TransactionMetadata; KAFKA-20090, PRs #21469 and #21506): no epoch
past 32767 is handed out; an epoch of 32766 and up is exhausted, so InitProducerId there hands a new producer id at
epoch 0; under TV2 the EndTxn v5 found at 32766 bumps to 32767 (its Prepare and markers carry it) and answers the
next producer id at epoch 0; under TV1 a fence at 32766 aborts at 32767, and the fencing producer's retry gets a new
producer id. read_committed sees every committed transaction and nothing aborted."""

from __future__ import annotations


import pytest
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from pybroker.records import build_batch
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic
from tests.integration.test_bad_input import WireClient
from tests.integration.test_transactions_v2 import (
    committed_values,
    end_txn,
    init_producer,
    marker_written,
    state_of,
)

LAST_EPOCH = 32767
V2_TOPIC = "txn-last-epoch-v2"
V1_TOPIC = "txn-last-epoch-v1"


@pytest.fixture(scope="module")
def broker(shared_broker: BrokerProcess) -> BrokerProcess:
    create_topic(shared_broker.bootstrap, V2_TOPIC, partitions=1)
    create_topic(shared_broker.bootstrap, V1_TOPIC, partitions=1)
    return shared_broker


def set_transaction_version(client: WireClient, level: int) -> None:
    update = UpdateFeaturesRequest(feature_updates=[UpdateFeaturesRequest.FeatureUpdateKey(
        feature="transaction.version", max_version_level=level, upgrade_type=1 if level == 2 else 2)])
    assert client.request(update, 1, UpdateFeaturesResponse).results[0].error_code == ErrorCode.NONE


def init(client: WireClient, transactional_id: str, producer: tuple[int, int]) -> InitProducerIdResponse:
    return client.request(InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60000,
                                                 producer_id=producer[0], producer_epoch=producer[1]), 5,
                          InitProducerIdResponse)


def bump_to(client: WireClient, transactional_id: str, producer: tuple[int, int], epoch: int) -> tuple[int, int]:
    """InitProducerId with the current id and epoch until the producer is at ``epoch``: one bump each."""
    while producer[1] < epoch:
        answer = init(client, transactional_id, producer)
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (0, producer[0], producer[1] + 1)
        producer = (answer.producer_id, answer.producer_epoch)
    return producer


def produce(client: WireClient, version: int, topic: str, transactional_id: str, value: bytes,
            producer: tuple[int, int], sequence: int = 0) -> int:
    batch = build_batch([(None, value)], producer_id=producer[0], producer_epoch=producer[1], base_sequence=sequence,
                        is_transactional=True)
    data = ProduceRequest.TopicProduceData(name=topic, partition_data=[
        ProduceRequest.PartitionProduceData(index=0, records=batch)])
    answer = client.request(ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=10000,
                                           topic_data=[data]), version, ProduceResponse)
    return answer.responses[0].partition_responses[0].error_code


def add_partition(client: WireClient, topic: str, transactional_id: str, producer: tuple[int, int]) -> int:
    add = AddPartitionsToTxnRequest(v3_and_below_transactional_id=transactional_id,
                                    v3_and_below_producer_id=producer[0], v3_and_below_producer_epoch=producer[1],
                                    v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                                        name=topic, partitions=[0])])
    answer = client.request(add, 3, AddPartitionsToTxnResponse)
    return answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def completed(client: WireClient, transactional_id: str, state: str) -> None:
    eventually(lambda: state_of(client, transactional_id) == state, f"{transactional_id} to reach {state}")


def test_tv2_end_txn_at_the_exhausted_epoch_moves_the_producer_to_a_new_id(broker: BrokerProcess) -> None:
    client = WireClient(broker.bootstrap)
    app = "last-epoch-v2"
    try:  # a new single node finalizes transaction.version 2
        producer = bump_to(client, app, init_producer(client, app), LAST_EPOCH - 3)
        pid = producer[0]
        assert produce(client, 12, V2_TOPIC, app, b"committed-32764", producer) == ErrorCode.NONE
        ended = end_txn(client, app, producer, commit=True, version=5)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, LAST_EPOCH - 2)
        completed(client, app, "CompleteCommit")
        producer = (pid, LAST_EPOCH - 2)
        assert produce(client, 12, V2_TOPIC, app, b"aborted-32765", producer) == ErrorCode.NONE
        ended = end_txn(client, app, producer, commit=False, version=5)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, LAST_EPOCH - 1)
        completed(client, app, "CompleteAbort")
        producer = (pid, LAST_EPOCH - 1)
        assert produce(client, 12, V2_TOPIC, app, b"committed-32766", producer) == ErrorCode.NONE
        ended = end_txn(client, app, producer, commit=True, version=5)
        assert ended.error_code == ErrorCode.NONE
        assert (ended.producer_id != pid, ended.producer_epoch) == (True, 0)  # no epoch past 32767: a new id
        marker_written(client, V2_TOPIC, 0, (pid, LAST_EPOCH))  # the Prepare's bump: the markers carry 32767
        completed(client, app, "CompleteCommit")
        retried = end_txn(client, app, producer, commit=True, version=5)  # its answer was lost: the same again
        assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (0, ended.producer_id, 0)
        # a late write of the ended transaction: the coordinator the leader asks knows that producer id no more
        assert produce(client, 12, V2_TOPIC, app, b"late", producer, sequence=1) \
            == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        following = (ended.producer_id, 0)
        assert produce(client, 12, V2_TOPIC, app, b"committed-next-id", following) == ErrorCode.NONE
        ended = end_txn(client, app, following, commit=True, version=5)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, following[0], 1)
        completed(client, app, "CompleteCommit")
    finally:
        client.close()
    assert committed_values(broker.bootstrap, topic=V2_TOPIC) == [b"committed-32764", b"committed-32766",
                                                          b"committed-next-id"]


def test_tv1_fence_at_the_exhausted_epoch_aborts_at_the_last_one_and_the_retry_gets_a_new_id(
        broker: BrokerProcess) -> None:
    client = WireClient(broker.bootstrap)
    app = "last-epoch-v1"
    try:
        set_transaction_version(client, 1)
        producer = bump_to(client, app, init_producer(client, app), LAST_EPOCH - 2)
        pid = producer[0]
        assert add_partition(client, V1_TOPIC, app, producer) == ErrorCode.NONE
        assert produce(client, 11, V1_TOPIC, app, b"committed-32765", producer) == ErrorCode.NONE
        assert end_txn(client, app, producer, commit=True, version=4).error_code == ErrorCode.NONE
        completed(client, app, "CompleteCommit")
        producer = bump_to(client, app, producer, LAST_EPOCH - 1)
        assert add_partition(client, V1_TOPIC, app, producer) == ErrorCode.NONE
        assert produce(client, 11, V1_TOPIC, app, b"aborted-32766", producer) == ErrorCode.NONE
        # A new instance of the producer: its InitProducerId fences the open transaction, aborted at 32767 (the
        # last epoch, never handed out), and is told to retry until the abort completed.
        fenced = init(client, app, (-1, -1))
        assert fenced.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
        marker_written(client, V1_TOPIC, 0, (pid, LAST_EPOCH))

        def retried() -> InitProducerIdResponse | None:
            answer = init(client, app, (-1, -1))
            return None if answer.error_code == ErrorCode.CONCURRENT_TRANSACTIONS else answer

        fresh = eventually(retried, "the fencing InitProducerId to go through")
        assert fresh is not None
        assert (fresh.error_code, fresh.producer_id != pid, fresh.producer_epoch) == (0, True, 0)
        assert end_txn(client, app, producer, commit=True, version=4).error_code \
            == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert produce(client, 11, V1_TOPIC, app, b"late", producer, sequence=1) \
            == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        following = (fresh.producer_id, 0)
        assert add_partition(client, V1_TOPIC, app, following) == ErrorCode.NONE
        assert produce(client, 11, V1_TOPIC, app, b"committed-next-id", following) == ErrorCode.NONE
        assert end_txn(client, app, following, commit=True, version=4).error_code == ErrorCode.NONE
        completed(client, app, "CompleteCommit")
    finally:
        set_transaction_version(client, 2)
        client.close()
    assert committed_values(broker.bootstrap, topic=V1_TOPIC) == [b"committed-32765", b"committed-next-id"]
