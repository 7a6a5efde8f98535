"""Producer-id blocks (KIP-730): a broker prefetches its next block from the controller before the
current one runs out, answers COORDINATOR_LOAD_IN_PROGRESS's error when no block comes in time, and a
single node's own blocks never overlap the ones it hands out through AllocateProducerIds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pybroker.common.clock import ManualClock
from pybroker.zk import paths as zp
from pybroker.controller.embedded import EmbeddedMetadata
from pybroker.controller.errors import BrokerIdNotRegisteredError
from pybroker.controller.metadata import BrokerInfo
from pybroker.controller.producer_ids import BLOCK_SIZE, ProducerIdBlocks, ProducerIdsUnavailableError


class Controller:
    """Answers block requests in order; `hold` keeps the next answer back."""

    def __init__(self) -> None:
        self.requests = 0
        self.hold = asyncio.Event()
        self.hold.set()

    async def request_block(self) -> zp.ProducerIdBlock:
        start = self.requests * BLOCK_SIZE
        self.requests += 1
        await self.hold.wait()
        return zp.ProducerIdBlock(0, start, start + BLOCK_SIZE - 1)


def test_the_next_block_is_asked_for_before_the_current_one_runs_out() -> None:
    async def run() -> None:
        controller = Controller()
        blocks = ProducerIdBlocks(controller.request_block, wait_s=5)
        ids = [await blocks.next_id() for _ in range(BLOCK_SIZE - 100)]
        assert ids == list(range(BLOCK_SIZE - 100)) and controller.requests == 1
        ids.append(await blocks.next_id())  # 99 left: the prefetch starts
        await asyncio.sleep(0)
        assert controller.requests == 2
        controller.hold.clear()  # the controller is slow from now on: the prefetched block carries on
        ids += [await blocks.next_id() for _ in range(BLOCK_SIZE)]
        assert ids == list(range(2 * BLOCK_SIZE - 99)) and len(set(ids)) == len(ids)
    asyncio.run(run())


def test_no_block_in_time_is_an_error_and_a_late_block_is_still_used() -> None:
    """In time on the broker's clock: the wait ends when that clock passes it."""
    async def run() -> None:
        controller = Controller()
        controller.hold.clear()
        clock = ManualClock()
        blocks = ProducerIdBlocks(controller.request_block, wait_s=30, clock=clock)
        waiting = asyncio.create_task(blocks.next_id())
        await asyncio.sleep(0)  # the wait starts, its timer on the clock
        clock.advance(29.9)
        await asyncio.sleep(0)
        assert not waiting.done()
        clock.advance(0.1)
        with pytest.raises(ProducerIdsUnavailableError):
            await asyncio.wait_for(waiting, 5)
        controller.hold.set()
        assert await blocks.next_id() == 0
        assert controller.requests == 1  # the retry waited for the same request, it did not ask twice
    asyncio.run(run())


def test_a_single_nodes_reserved_blocks_never_overlap_its_own_ids(tmp_path: Path) -> None:
    def metadata() -> EmbeddedMetadata:
        return EmbeddedMetadata(str(tmp_path), BrokerInfo(3, "127.0.0.1", 9092), validate_configs=lambda _: None)

    async def run() -> None:
        node = metadata()
        own = [await node.allocate_producer_id() for _ in range(5)]
        reserved = await node.reserve_producer_id_block(3)
        own += [await node.allocate_producer_id() for _ in range(BLOCK_SIZE)]
        assert own[:5] == [0, 1, 2, 3, 4]
        assert reserved == zp.ProducerIdBlock(3, BLOCK_SIZE, 2 * BLOCK_SIZE - 1)
        assert not [i for i in own if reserved.start <= i <= reserved.end] and len(set(own)) == len(own)
        with pytest.raises(BrokerIdNotRegisteredError):
            await node.reserve_producer_id_block(4)
        restarted = metadata()
        assert await restarted.allocate_producer_id() > max(own + [reserved.end])
    asyncio.run(run())


def test_callers_waiting_together_for_the_first_block_all_get_an_id() -> None:
    """Chaos round 5008: producers starting at once on a fresh broker sent concurrent InitProducerIds;
    the first to wake took the block and the others failed at once although it had ids for them all."""
    async def run() -> None:
        controller = Controller()
        controller.hold.clear()
        blocks = ProducerIdBlocks(controller.request_block, wait_s=5)
        waiting = [asyncio.ensure_future(blocks.next_id()) for _ in range(3)]
        await asyncio.sleep(0)
        controller.hold.set()
        assert sorted(await asyncio.gather(*waiting)) == [0, 1, 2]
        assert controller.requests == 1
    asyncio.run(run())
