"""New groups committed to while other partitions of ``__consumer_offsets`` are still loading, on real brokers."""

from __future__ import annotations

import asyncio
from itertools import count
from pathlib import Path

from pybroker.client import AdminClient, KafkaClient, NewTopic
from pybroker.client.groups import GroupAdmin
from pybroker.common.topic import TopicPartition
from pybroker.coordinator.records import partition_for
from tests.integration.broker_process import BrokerProcess

OFFSETS_PARTITIONS = 50
IN_FLIGHT = 20
BROKERS = 3  # the loads end within a few milliseconds: each fresh broker is one more chance to overlap them
TP = TopicPartition("t", 0)


async def commit_new_groups_until_all_loaded(admin: GroupAdmin) -> dict[str, int]:
    """Commit to one new group after another, ``IN_FLIGHT`` at once, until each partition of
    ``__consumer_offsets`` took a commit (so was loaded): the loads end while first commits are written."""
    committed: dict[str, int] = {}
    loaded: set[int] = set()
    numbers = count()

    async def committer() -> None:
        while len(loaded) < OFFSETS_PARTITIONS:
            n = next(numbers)
            await admin.commit_offsets(f"g{n}", {TP: n})
            committed[f"g{n}"] = n
            loaded.add(partition_for(f"g{n}", OFFSETS_PARTITIONS))

    await asyncio.gather(*(committer() for _ in range(IN_FLIGHT)))
    return committed


async def commit_on_first_use(bootstrap: str) -> tuple[dict[str, int], list[dict[TopicPartition, int]]]:
    """The groups committed to as ``__consumer_offsets`` is created and loaded, and what each then has."""
    async with KafkaClient(bootstrap) as client:
        (await AdminClient(client).create_topics([NewTopic(TP.topic, 1, 1)]))[TP.topic].raise_error()
        admin = GroupAdmin(client)
        committed = await commit_new_groups_until_all_loaded(admin)
        return committed, list(await asyncio.gather(*(admin.committed_offsets(group) for group in committed)))


def test_first_commits_survive_other_partitions_loads(tmp_path: Path) -> None:
    """The first group request creates ``__consumer_offsets`` and the broker loads its partitions, serving the
    groups of those loaded while others still load. Each load used to drop every empty group without a
    committed offset, of any partition: a new group whose first commit was not replicated yet vanished with
    it, although the commit was answered without error (the console then said the group did not exist)."""
    for attempt in range(BROKERS):
        data_dir = tmp_path / str(attempt)
        data_dir.mkdir()
        broker = BrokerProcess(data_dir, {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}).start()
        try:
            committed, fetched = asyncio.run(commit_on_first_use(broker.bootstrap))
        finally:
            broker.kill()
        lost = [group for group, offsets in zip(committed, fetched) if not offsets]
        assert not lost, f"{len(lost)} of {len(committed)} new groups lost their answered commit: {lost[:10]}"
        assert fetched == [{TP: offset} for offset in committed.values()]
