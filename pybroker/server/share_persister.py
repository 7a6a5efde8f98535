"""The partition leader's way to its share-partitions' durable state (Kafka's DefaultStatePersister).

Each call goes to the share coordinator of the share-partition: the leader of its ``__share_group_state``
partition, found in this broker's metadata (as FindCoordinator(SHARE) would answer). When that is this broker,
the share coordinator is called in-process; otherwise the request goes over one reused inter-broker connection
per coordinator. Retriable answers (the coordinator is loading, moved, or not elected yet; the connection failed)
are retried with a backoff until ``request.timeout.ms`` has passed, as Kafka's PersisterStateManager retries
them; the last code is then the answer.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable, TypeVar

from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaClientError
from pybroker.client.sasl import SaslCredentials
from pybroker.coordinator.share_state.records import ShareKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from pybroker.protocol.schema import Message
from pybroker.replication.share.durable import RETRIED, DurableBatch
from pybroker.server.broker_connections import BrokerConnections
from pybroker.server.internal_topic import MetadataSource
from pybroker.server.share_state_service import ShareStateService

log = logging.getLogger("pybroker.share")

BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
M = TypeVar("M", bound=Message)


@dataclass(slots=True)
class ReadState:
    error: ErrorCode
    state_epoch: int = 0
    start_offset: int = -1
    batches: list[DurableBatch] = field(default_factory=list)


class SharePersister:
    def __init__(self, broker_id: int, metadata: MetadataSource, coordinator: ShareStateService, *,
                 timeout_ms: int, tls: ssl.SSLContext | None, sasl: SaslCredentials | None) -> None:
        self._broker_id = broker_id
        self._metadata = metadata
        self._coordinator = coordinator
        self._timeout_s = timeout_ms / 1000
        self._connections = BrokerConnections("share-state-persister", self._timeout_s, tls, sasl)

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> ErrorCode:
        R = InitializeShareGroupStateRequest
        request = R(group_id=group_id, topics=[R.InitializeStateData(topic_id=topic_id, partitions=[
            R.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start_offset)])])

        def code(response: InitializeShareGroupStateResponse) -> ErrorCode:
            return ErrorCode(response.results[0].partitions[0].error_code)
        answer = await self._call(ShareKey(group_id, topic_id, partition), request, InitializeShareGroupStateResponse,
                                  self._coordinator.initialize, code)
        return answer if isinstance(answer, ErrorCode) else code(answer)

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadState:
        R = ReadShareGroupStateRequest
        request = R(group_id=group_id, topics=[R.ReadStateData(topic_id=topic_id, partitions=[
            R.PartitionData(partition=partition, leader_epoch=leader_epoch)])])

        def code(response: ReadShareGroupStateResponse) -> ErrorCode:
            return ErrorCode(response.results[0].partitions[0].error_code)
        answer = await self._call(ShareKey(group_id, topic_id, partition), request, ReadShareGroupStateResponse,
                                  self._coordinator.read, code)
        if isinstance(answer, ErrorCode):
            return ReadState(answer)
        found = answer.results[0].partitions[0]
        return ReadState(ErrorCode(found.error_code), found.state_epoch, found.start_offset,
                         [DurableBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                          for b in found.state_batches])

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[DurableBatch]) -> ErrorCode:
        R = WriteShareGroupStateRequest
        request = R(group_id=group_id, topics=[R.WriteStateData(topic_id=topic_id, partitions=[R.PartitionData(
            partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
            delivery_complete_count=sum(b.last - b.first + 1 for b in batches if b.state in (2, 4)),
            state_batches=[R.StateBatch(first_offset=b.first, last_offset=b.last, delivery_state=b.state,
                                        delivery_count=b.delivery_count) for b in batches])])])

        def code(response: WriteShareGroupStateResponse) -> ErrorCode:
            return ErrorCode(response.results[0].partitions[0].error_code)
        answer = await self._call(ShareKey(group_id, topic_id, partition), request, WriteShareGroupStateResponse,
                                  self._coordinator.write, code)
        return answer if isinstance(answer, ErrorCode) else code(answer)

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int
                      ) -> ReadShareGroupStateSummaryResponse.PartitionResult | ErrorCode:
        """ReadShareGroupStateSummary of one share-partition: its answer, or the error code when none came."""
        R = ReadShareGroupStateSummaryRequest
        request = R(group_id=group_id, topics=[R.ReadStateSummaryData(topic_id=topic_id, partitions=[
            R.PartitionData(partition=partition, leader_epoch=-1)])])

        def code(response: ReadShareGroupStateSummaryResponse) -> ErrorCode:
            return ErrorCode(response.results[0].partitions[0].error_code)
        answer = await self._call(ShareKey(group_id, topic_id, partition), request,
                                  ReadShareGroupStateSummaryResponse, self._coordinator.summary, code)
        return answer if isinstance(answer, ErrorCode) else answer.results[0].partitions[0]

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> ErrorCode:
        R = DeleteShareGroupStateRequest
        request = R(group_id=group_id, topics=[R.DeleteStateData(topic_id=topic_id, partitions=[
            R.PartitionData(partition=partition)])])

        def code(response: DeleteShareGroupStateResponse) -> ErrorCode:
            return ErrorCode(response.results[0].partitions[0].error_code)
        answer = await self._call(ShareKey(group_id, topic_id, partition), request, DeleteShareGroupStateResponse,
                                  self._coordinator.delete, code)
        return answer if isinstance(answer, ErrorCode) else code(answer)

    async def _call(self, key: ShareKey, request: Message, response_type: type[M],
                    local: Callable[..., Awaitable[M]], code: Callable[[M], ErrorCode]) -> M | ErrorCode:
        """The coordinator's response, retried while retriable; the last error code when none came."""
        deadline = time.monotonic() + self._timeout_s
        attempt = 0
        while True:
            answer = await self._attempt(key, request, response_type, local)
            error = answer if isinstance(answer, ErrorCode) else code(answer)
            if error not in RETRIED or time.monotonic() >= deadline:
                return answer
            await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
            attempt += 1

    async def _attempt(self, key: ShareKey, request: Message, response_type: type[M],
                       local: Callable[..., Awaitable[M]]) -> M | ErrorCode:
        try:  # no waiting for the new topic's leaders: COORDINATOR_NOT_AVAILABLE below is retried with a backoff
            await self._coordinator.topic.ensure()
        except Exception as exc:
            log.debug("Creating %s failed: %s", self._coordinator.topic.name, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        node = self._coordinator.coordinator_node(key)
        if node is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if node == self._broker_id:
            return await local(request)
        broker = next((b for b in self._metadata().brokers() if b.broker_id == node), None)
        if broker is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        connection: Connection | None = None
        try:
            connection = await self._connections.get(broker.broker_id, broker.host, broker.port)
            return await connection.send(request, response_type)
        except (KafkaClientError, OSError, asyncio.TimeoutError) as exc:
            log.info("%s to share coordinator %d failed: %s", type(request).__name__, node, exc)
            if connection is not None:
                await self._connections.drop(broker.broker_id, connection)
            return ErrorCode.NETWORK_EXCEPTION

    async def close(self) -> None:
        await self._connections.close()
