"""Producer-id blocks as ZooKeeper-mode Kafka 3.x hands them out (KIP-730).

The controller alone writes /latest_producer_id_block: each AllocateProducerIds it answers reserves
the next block of ``BLOCK_SIZE`` ids with a version-checked write, so no two brokers ever get the same
block even across controller changes. A broker hands out the ids of its block and asks the controller
for the next one when nine tenths are used (Kafka's RPCProducerIdManager prefetches at the same point),
so an InitProducerId rarely waits for the round trip.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from kazoo.exceptions import BadVersionError, NodeExistsError

from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.zk import paths as zp
from pybroker.controller.errors import MetadataError
from pybroker.zk.client import ZkClient

__all__ = ["BLOCK_SIZE", "ProducerIdBlocks", "ProducerIdsUnavailableError", "reserve_block"]

log = logging.getLogger("pybroker.controller")
BLOCK_SIZE = 1000
PREFETCH_AT = 0.9  # share of a block used when the next one is asked for


class ProducerIdsUnavailableError(MetadataError):
    """No producer-id block could be had in time: COORDINATOR_LOAD_IN_PROGRESS, which clients retry
    (Kafka's answer while its RPCProducerIdManager waits for a block)."""


async def reserve_block(zk: ZkClient, broker_id: int) -> zp.ProducerIdBlock:
    """The next block after the one /latest_producer_id_block names, written there for `broker_id`."""
    while True:
        node = await zk.get(zp.PRODUCER_ID_BLOCK)
        previous = zp.decode_producer_id_block(node[0]) if node is not None else None
        start = 0 if previous is None else previous.end + 1
        block = zp.ProducerIdBlock(broker_id, start, start + BLOCK_SIZE - 1)
        try:
            if node is None:
                await zk.create(zp.PRODUCER_ID_BLOCK, zp.encode_producer_id_block(block))
            else:
                await zk.set(zp.PRODUCER_ID_BLOCK, zp.encode_producer_id_block(block), node[1].version)
        except (BadVersionError, NodeExistsError):
            continue  # another controller's write came first: take the block after it
        return block


class ProducerIdBlocks:
    """A broker's current block of producer ids; `request_block` gets the next one from the controller."""

    def __init__(self, request_block: Callable[[], Awaitable[zp.ProducerIdBlock]], wait_s: float,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._request_block = request_block
        self._wait_s = wait_s
        self._clock = clock  # the broker's: `wait_s` is measured on it
        self._ids: range = range(0)
        self._next: zp.ProducerIdBlock | None = None
        self._fetching: asyncio.Task[bool] | None = None

    async def next_id(self) -> int:
        """The next id; waits at most `wait_s` for a block. Callers that wait together share one request:
        the first to wake takes the block, and the others wait for the next one within their time."""
        deadline = self._clock.monotonic() + self._wait_s
        while not self._ids:
            if self._next is not None:
                self._ids, self._next = range(self._next.start, self._next.end + 1), None
                break
            try:
                fetched = await self._clock.wait_for(asyncio.shield(self._fetch()),
                                                     max(deadline - self._clock.monotonic(), 0))
            except asyncio.TimeoutError:
                fetched = False
            if not fetched and self._next is None and not self._ids:
                raise ProducerIdsUnavailableError("No producer id block from the controller yet")
        producer_id, self._ids = self._ids[0], self._ids[1:]
        if len(self._ids) <= BLOCK_SIZE * (1 - PREFETCH_AT) and self._next is None:
            self._fetch()
        return producer_id

    def _fetch(self) -> asyncio.Task[bool]:
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.get_running_loop().create_task(self._fetch_block(), name="producer-id-block")
        return self._fetching

    async def _fetch_block(self) -> bool:
        try:
            self._next = await self._request_block()
        except (OSError, MetadataError, asyncio.TimeoutError) as exc:
            log.warning("Could not get a producer id block from the controller: %r", exc)
            return False
        return True
