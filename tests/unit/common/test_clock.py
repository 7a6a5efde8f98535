from __future__ import annotations

import asyncio

import pytest

from pybroker.common.clock import SYSTEM_CLOCK, ManualClock


def test_a_manual_clock_moves_only_when_advanced() -> None:
    clock = ManualClock(wall_ms=1_000, monotonic=5.0)
    assert (clock.wall_ms(), clock.monotonic()) == (1_000, 5.0)
    clock.advance(1.5)
    assert (clock.wall_ms(), clock.monotonic()) == (2_500, 6.5)
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_sleepers_wake_in_deadline_order_once_their_deadline_passes() -> None:
    async def scenario() -> list[str]:
        clock = ManualClock()
        woke: list[str] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append(name)

        tasks = [asyncio.create_task(sleeper("late", 3)), asyncio.create_task(sleeper("early", 1))]
        await asyncio.sleep(0)
        clock.advance(0.5)
        await asyncio.sleep(0)
        assert woke == []
        clock.advance(0.5)
        await asyncio.sleep(0)
        assert woke == ["early"]
        clock.advance(5)
        await asyncio.gather(*tasks)
        return woke

    assert asyncio.run(scenario()) == ["early", "late"]


def test_the_system_clock_reads_the_machine() -> None:
    first = SYSTEM_CLOCK.monotonic()
    asyncio.run(SYSTEM_CLOCK.sleep(0.001))
    assert SYSTEM_CLOCK.monotonic() > first
    assert SYSTEM_CLOCK.wall_ms() > 1_700_000_000_000


def test_wait_for_answers_what_completes_in_time_and_times_out_when_the_clock_passes_the_limit() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        waiting = asyncio.create_task(clock.wait_for(answered, 5))
        clock.advance(4.9)
        answered.set_result("done")
        assert await waiting == "done"

        never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        expiring = asyncio.create_task(clock.wait_for(never, 5))
        await asyncio.sleep(0)  # the waiter registers its timer
        clock.advance(5)
        with pytest.raises(TimeoutError):
            await expiring
        assert never.cancelled()

    asyncio.run(scenario())


def test_the_system_clocks_wait_for_times_out() -> None:
    async def scenario() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with pytest.raises(TimeoutError):
            await SYSTEM_CLOCK.wait_for(never, 0.001)

    asyncio.run(scenario())
