"""The console's one connection to the cluster: a KafkaClient made on first use and dropped when it breaks.

Page handlers and the background sampler share it; a lock keeps their requests from racing to open
the same broker connection twice. A connection failure closes the client, so the next request starts
afresh from the bootstrap list (the broker may be back), and the page shows a banner meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Awaitable, Callable, TypeVar

from pybroker.client.command_line import ClientSettings
from pybroker.client import KafkaClient, KafkaConnectionError, KafkaTimeoutError

T = TypeVar("T")
UNREACHABLE = (KafkaConnectionError, KafkaTimeoutError, ConnectionError)


class ClusterSession:
    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._client: KafkaClient | None = None
        self._lock = asyncio.Lock()

    async def run(self, operation: Callable[[KafkaClient], Awaitable[T]]) -> T:
        """Run ``operation`` with a connected client; on a connection failure the client is dropped and the
        error raised for the page to show."""
        async with self._lock:
            try:
                if self._client is None:
                    self._client = KafkaClient(self.settings.bootstrap, client_id=self.settings.client_id,
                                               timeout=self.settings.timeout_s, sasl=self.settings.sasl,
                                               tls=self.settings.tls)
                await self._client.connect()
                return await operation(self._client)
            except UNREACHABLE:
                await self._drop()
                raise

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    async def close(self) -> None:
        async with self._lock:
            await self._drop()
