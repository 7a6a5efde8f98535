"""A single-node broker has no other broker, so it serves none of the requests only brokers send
(CLUSTER_AUTHORIZATION_FAILED, nothing applied, the connection closed); clients may not Produce to the internal topics
(Kafka's "Cannot append to internal topic", INVALID_TOPIC_EXCEPTION)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaConnectionError
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_confluent_kafka import create_topic


def leader_and_isr(topic: str, *, controller_id: int = 0, controller_epoch: int = 1, broker_epoch: int = -1,
                   leader_port: int = 9092) -> LeaderAndIsrRequest:
    """A LeaderAndIsr making this broker the leader of ``topic``-0 (it would create the log)."""
    return LeaderAndIsrRequest(
        controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch, type=0,
        live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=0, host_name="127.0.0.1",
                                                                 port=leader_port)],
        topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
            topic_name=topic, topic_id=uuid.uuid4(), partition_states=[
                LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                    partition_index=0, controller_epoch=controller_epoch, leader=0, leader_epoch=7, isr=[0],
                    partition_epoch=0, replicas=[0], adding_replicas=[], removing_replicas=[], is_new=True)])])


def stop_replica(topic: str, *, controller_id: int = 0, controller_epoch: int = 1,
                 broker_epoch: int = -1) -> StopReplicaRequest:
    return StopReplicaRequest(controller_id=controller_id, controller_epoch=controller_epoch,
                              broker_epoch=broker_epoch, topic_states=[StopReplicaRequest.StopReplicaTopicState(
                                  topic_name=topic, partition_states=[StopReplicaRequest.StopReplicaPartitionState(
                                      partition_index=0, leader_epoch=100, delete_partition=True)])])


def test_single_node_refuses_every_inter_broker_request(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "kept", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("kept", b"record")
    assert producer.flush(30) == 0
    assert broker.port is not None
    port = broker.port

    async def send() -> list[int]:
        codes = []
        for request, version, response_type in (
                (leader_and_isr("ghost", controller_epoch=10 ** 6, leader_port=port), 7, LeaderAndIsrResponse),
                (UpdateMetadataRequest(controller_id=0, controller_epoch=10 ** 6, broker_epoch=-1, live_brokers=[],
                                       topic_states=[]), 8, UpdateMetadataResponse),
                (stop_replica("kept"), 4, StopReplicaResponse),
                (ControlledShutdownRequest(broker_id=0, broker_epoch=-1), 3, ControlledShutdownResponse)):
            connection = await Connection.open("127.0.0.1", port, client_id="forger", timeout=10)
            try:  # each on a connection of its own: a refused one is closed after its answer
                codes.append((await connection.send_at(request, version, response_type)).error_code)
                with pytest.raises(KafkaConnectionError):
                    await connection.send_at(ApiVersionsRequest(), 0, ApiVersionsResponse)
            finally:
                await connection.close()
        return codes

    assert asyncio.run(send()) == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 4
    assert not (broker.data_dir / "logs" / "ghost-0").exists()
    assert (broker.data_dir / "logs" / "kept-0").is_dir()  # the StopReplica deleted nothing
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("kept", 0, 0)])
        message = consumer.poll(30)
        assert message is not None and message.error() is None and message.value() == b"record"
    finally:
        consumer.close()


def test_clients_cannot_produce_to_internal_topics(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "source", 1)
    transactional = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "guard-txn"})
    transactional.init_transactions(30)  # creates __transaction_state
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "guard-group",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("source", 0, 5)], asynchronous=False)  # creates __consumer_offsets
        outcomes: list[KafkaError] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
        for topic in ("__consumer_offsets", "__transaction_state"):
            producer.produce(topic, b"garbage", key=b"garbage", partition=0,
                             on_delivery=lambda err, _msg: outcomes.append(err))
        assert producer.flush(30) == 0
        assert [err.code() if err is not None else None for err in outcomes] == [KafkaError.TOPIC_EXCEPTION] * 2
        # The coordinators still read their own records.
        [committed] = consumer.committed([TopicPartition("source", 0)], timeout=30)
        assert committed.offset == 5
    finally:
        consumer.close()
