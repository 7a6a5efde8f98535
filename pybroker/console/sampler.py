"""The charts' data: every few seconds the console samples log end offsets and groups' committed offsets.

Messages in per second per topic is the growth of the sum of its log end offsets; messages out per
second is the growth of the sum of every group's committed offsets on it (what consumers have
processed); lag per group is log end minus committed over the group's partitions. One hour is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict, deque
from dataclasses import dataclass

from pybroker.client import KafkaClient, KafkaClientError
from pybroker.client.groups import GroupAdmin
from pybroker.common.topic import TopicPartition
from pybroker.console.cluster_views import log_end_offsets
from pybroker.console.session import ClusterSession

HISTORY_S = 3600
log = logging.getLogger("pybroker.console")


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # time.time()
    topic_end: dict[str, int]  # sum of log end offsets
    topic_committed: dict[str, int]  # sum over groups of committed offsets
    group_lag: dict[str, int]


@dataclass(frozen=True, slots=True)
class Series:
    times: list[float]
    values: dict[str, list[float]]


class Sampler:
    def __init__(self, session: ClusterSession, interval_s: float) -> None:
        self.session = session
        self.interval_s = interval_s
        self.samples: deque[Sample] = deque(maxlen=max(2, int(HISTORY_S / interval_s) + 1))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                self.samples.append(await self.session.run(take_sample))
            except KafkaClientError as exc:  # the cluster is away: a gap in the charts, the pages say why
                log.info("Sampling skipped: %s", exc)
            await asyncio.sleep(self.interval_s)

    def rates(self) -> tuple[Series, Series]:
        """Messages in and out per second per topic, between consecutive samples."""
        pairs = list(zip(self.samples, list(self.samples)[1:]))
        times = [later.at for _, later in pairs]
        inbound: dict[str, list[float]] = defaultdict(list)
        outbound: dict[str, list[float]] = defaultdict(list)
        topics = {t for s in self.samples for t in s.topic_end}
        for earlier, later in pairs:
            elapsed = max(later.at - earlier.at, 1e-3)
            for topic in topics:
                inbound[topic].append(_rate(earlier.topic_end, later.topic_end, topic, elapsed))
                outbound[topic].append(_rate(earlier.topic_committed, later.topic_committed, topic, elapsed))
        return Series(times, dict(inbound)), Series(times, dict(outbound))

    def lags(self) -> Series:
        groups = sorted({g for s in self.samples for g in s.group_lag})
        return Series([s.at for s in self.samples],
                      {g: [float(s.group_lag.get(g, 0)) for s in self.samples] for g in groups})

    def latest_in_rate(self, topic: str) -> float | None:
        if len(self.samples) < 2:
            return None
        earlier, later = self.samples[-2], self.samples[-1]
        return _rate(earlier.topic_end, later.topic_end, topic, max(later.at - earlier.at, 1e-3))


def _rate(earlier: dict[str, int], later: dict[str, int], topic: str, elapsed: float) -> float:
    if topic not in earlier or topic not in later:
        return 0.0
    return max(later[topic] - earlier[topic], 0) / elapsed


async def take_sample(client: KafkaClient) -> Sample:
    at = time.time()
    response = await client.metadata(None)
    partitions = {TopicPartition(t.name, p.partition_index) for t in response.topics if t.name and not t.error_code
                  for p in t.partitions}
    ends = await log_end_offsets(client, partitions)
    groups = GroupAdmin(client)
    committed_by_topic: dict[str, int] = defaultdict(int)
    lags: dict[str, int] = {}
    for group in await groups.list_groups():
        committed = await groups.committed_offsets(group.group_id)
        lags[group.group_id] = sum(max(ends[tp] - offset, 0) for tp, offset in committed.items() if tp in ends)
        for tp, offset in committed.items():
            committed_by_topic[tp.topic] += offset
    topic_end: dict[str, int] = defaultdict(int)
    for tp, offset in ends.items():
        topic_end[tp.topic] += offset
    return Sample(at, dict(topic_end), dict(committed_by_topic), lags)
