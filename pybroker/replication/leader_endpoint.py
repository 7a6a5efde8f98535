"""The follower's only way to reach a leader (Kafka's LeaderEndPoint): tests swap in a fake.

The remote implementation speaks Fetch v12 (topic names, `replica_id` in the body),
OffsetForLeaderEpoch v3 (the first version with `replica_id`) and ListOffsets v4 (the first with
`current_leader_epoch`) over one connection it reopens after a failure.
"""

from __future__ import annotations

import ssl
from typing import Protocol

from pybroker.client.connection import Connection
from pybroker.client.sasl import SaslCredentials
from pybroker.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
LIST_OFFSETS_VERSION = 4


class LeaderEndPoint(Protocol):
    async def fetch(self, request: FetchRequest) -> FetchResponse: ...

    async def offsets_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse: ...

    async def list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse: ...

    async def close(self) -> None: ...


class RemoteLeader:
    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float, tls: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None):
        self.host, self.port = host, port
        self._tls = tls
        self._sasl = sasl
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._connection: Connection | None = None

    async def _connect(self) -> Connection:
        if self._connection is None:
            self._connection = await Connection.open(self.host, self.port, tls=self._tls, client_id=self._client_id,
                                                     timeout=self._timeout_s, sasl=self._sasl)
        return self._connection

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        connection = await self._connect()
        try:
            return await connection.send_at(request, FETCH_VERSION, FetchResponse,
                                            timeout=self._timeout_s + request.max_wait_ms / 1000)
        except BaseException:
            await self.close()
            raise

    async def offsets_for_leader_epoch(self, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
        connection = await self._connect()
        try:
            return await connection.send_at(request, OFFSET_FOR_LEADER_EPOCH_VERSION, OffsetForLeaderEpochResponse)
        except BaseException:
            await self.close()
            raise

    async def list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        connection = await self._connect()
        try:
            return await connection.send_at(request, LIST_OFFSETS_VERSION, ListOffsetsResponse)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()
