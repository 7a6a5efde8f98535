"""AppendQueue: a partition's appends take turns in the order they joined, even when one in the middle gives up."""

from __future__ import annotations

import asyncio

from pybroker.replication.append_queue import AppendQueue


def test_turns_are_taken_in_order_and_a_partition_is_free_once_the_last_has_left() -> None:
    async def scenario() -> None:
        queue = AppendQueue()
        assert not queue.busy("t", 0)
        first_before, first = queue.join("t", 0)
        second_before, second = queue.join("t", 0)
        assert first_before is None and second_before is first
        assert queue.busy("t", 0) and not queue.busy("t", 1)
        queue.leave("t", 0, first_before, first)
        assert first.done() and queue.busy("t", 0)
        queue.leave("t", 0, second_before, second)
        assert second.done() and not queue.busy("t", 0)

    asyncio.run(scenario())


def test_one_that_gives_up_early_does_not_let_the_next_overtake_the_one_before_it() -> None:
    async def scenario() -> None:
        queue = AppendQueue()
        _, first = queue.join("t", 0)
        second_before, second = queue.join("t", 0)
        third_before, third = queue.join("t", 0)
        queue.leave("t", 0, second_before, second)  # cancelled while the first is still being checked
        assert not second.done()  # so the third still waits for the first
        queue.leave("t", 0, None, first)
        await asyncio.wait_for(asyncio.shield(second), 5)  # ended by the first's end
        assert third_before is second and queue.busy("t", 0)
        queue.leave("t", 0, third_before, third)
        assert not queue.busy("t", 0)

    asyncio.run(scenario())
