"""One reused inter-broker connection per broker, for the requests a broker sends its peers on its own behalf
(transaction markers, AddPartitionsToTxn verification, share-group state): opened on first use over the
inter-broker listener's TLS and SASL, opened again when the broker's address changed, and dropped by the caller
when a send on it failed."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from pybroker.client.connection import Connection
from pybroker.client.sasl import SaslCredentials


class BrokerConnections:
    def __init__(self, client_id: str, timeout_s: float, tls: ssl.SSLContext | None,
                 sasl: SaslCredentials | None) -> None:
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._tls = tls
        self._sasl = sasl
        self._connections: dict[int, Connection] = {}
        self._opening: dict[int, asyncio.Lock] = {}

    async def get(self, broker_id: int, host: str, port: int) -> Connection:
        """The open connection to ``broker_id``, or a new one (one opening at a time per broker)."""
        lock = self._opening.setdefault(broker_id, asyncio.Lock())
        async with lock:
            connection = self._connections.get(broker_id)
            if connection is not None and (connection.host, connection.port) != (host, port):
                await self.drop(broker_id, connection)
                connection = None
            if connection is None:
                connection = await Connection.open(host, port, tls=self._tls, client_id=self._client_id,
                                                   timeout=self._timeout_s, sasl=self._sasl)
                self._connections[broker_id] = connection
            return connection

    async def drop(self, broker_id: int, connection: Connection) -> None:
        """Close ``connection``; forget it unless another send already replaced it."""
        if self._connections.get(broker_id) is connection:
            del self._connections[broker_id]
        with contextlib.suppress(Exception):
            await connection.close()

    async def close(self) -> None:
        for broker_id, connection in list(self._connections.items()):
            await self.drop(broker_id, connection)
