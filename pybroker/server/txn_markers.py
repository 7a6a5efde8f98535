"""WriteTxnMarkers to the other brokers of the cluster (Kafka's TransactionMarkerChannelManager).

The transaction coordinator writes COMMIT/ABORT markers itself to the partitions this broker
leads; the rest go, grouped by leader, to those leaders over one reused connection per broker.
A failed send drops the connection and reports every partition of it as NETWORK_EXCEPTION; the
coordinator's runtime (``txn_runtime``) retries them after its backoff, with the leaders known then
(its transaction stays in a Prepare state and the producer gets CONCURRENT_TRANSACTIONS meanwhile).

The same connections carry a leader's AddPartitionsToTxn v5 to the coordinator of a transactional
Produce (Kafka's AddPartitionsToTxnManager): the verification of a V1 client's partitions, or the
implicit add of a V2 client's.
"""

from __future__ import annotations

import logging
import ssl

from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaClientError
from pybroker.client.sasl import SaslCredentials
from pybroker.common.topic import TopicPartition
from pybroker.controller.metadata import BrokerInfo
from pybroker.coordinator.txn_coordinator import MarkerRequest
from pybroker.protocol.error_codes import ErrorCode
from pybroker.server.broker_connections import BrokerConnections
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

log = logging.getLogger("pybroker.coordinator")

Marker = WriteTxnMarkersRequest.WritableTxnMarker
MarkerTopic = WriteTxnMarkersRequest.WritableTxnMarkerTopic


class MarkerChannel:
    def __init__(self, timeout_ms: int, tls: ssl.SSLContext | None = None, sasl: SaslCredentials | None = None) -> None:
        self._connections = BrokerConnections("txn-marker-sender", timeout_ms / 1000, tls, sasl)

    async def send(self, broker: BrokerInfo, marker: MarkerRequest,
                   partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Ask ``broker`` to write ``marker`` to ``partitions`` (which it leads); an error per partition. The
        marker's transaction version goes along at v2 (KIP-1228); a broker serving only v1 checks it as legacy."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = WriteTxnMarkersRequest(markers=[Marker(
            producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
            transaction_result=marker.commit, coordinator_epoch=marker.coordinator_epoch,
            transaction_version=marker.transaction_version,
            topics=[MarkerTopic(name=topic, partition_indexes=indexes) for topic, indexes in by_topic.items()])])
        connection: Connection | None = None
        try:
            connection = await self._connections.get(broker.broker_id, broker.host, broker.port)
            response = await connection.send(request, WriteTxnMarkersResponse)
        except (KafkaClientError, OSError) as exc:
            log.warning("WriteTxnMarkers to broker %d for transaction %s failed: %s", broker.broker_id,
                        marker.transactional_id, exc)
            if connection is not None:
                await self._connections.drop(broker.broker_id, connection)
            return {tp: ErrorCode.NETWORK_EXCEPTION for tp in partitions}
        codes = {tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in partitions}  # a partition missing from the answer
        for result in response.markers:
            for answered in result.topics:
                for answer in answered.partitions:
                    codes[TopicPartition(answered.name, answer.partition_index)] = ErrorCode(answer.error_code)
        return codes

    async def add_partitions(self, broker: BrokerInfo, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition], *, verify_only: bool) -> ErrorCode:
        """Ask the coordinator ``broker`` to add (or only verify) ``partitions``: one code for them all, as the
        coordinator answers; NOT_COORDINATOR when it cannot be reached (the producer retries)."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=verify_only, topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=p)
                                             for t, p in by_topic.items()])])
        connection: Connection | None = None
        try:
            connection = await self._connections.get(broker.broker_id, broker.host, broker.port)
            response = await connection.send(request, AddPartitionsToTxnResponse, min_version=4)
        except (KafkaClientError, OSError) as exc:
            log.warning("AddPartitionsToTxn to coordinator %d for transaction %s failed: %s", broker.broker_id,
                        transactional_id, exc)
            if connection is not None:
                await self._connections.drop(broker.broker_id, connection)
            return ErrorCode.NOT_COORDINATOR
        if response.error_code:
            return ErrorCode(response.error_code)
        codes = {ErrorCode(p.partition_error_code) for result in response.results_by_transaction
                 for topic in result.topic_results for p in topic.results_by_partition}
        return next((code for code in codes if code is not ErrorCode.NONE), ErrorCode.NONE)

    async def close(self) -> None:
        await self._connections.close()
