"""A seeded simulation of one partition on three replicas: appends, follower fetches, ISR changes and
leader changes, driven by one random generator and a manual clock, over real logs and the real
`Partition`, ISR/high-watermark rules and fetcher truncation.

Invariants:
- HighWatermarkNeverDecreases (after every step): no replica's high watermark ever goes down;
- AckedRecordsSurvive (after every leader change and at the end): every record acknowledged to a
  producer (acks=all, min ISR 2) is in the current leader's log at the offset it was acknowledged
  with, across every leader change that elects an ISR member.
A failure names the seed (the test parameter); rerun that parameter to replay the exact history.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from pybroker.log import LogConfig, PartitionLog
from pybroker.records.batch import iter_batches
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.errors import NotEnoughReplicasError
from pybroker.replication.fetcher import truncate_to_leader
from pybroker.replication.partition import Partition

REPLICAS = (0, 1, 2)
MIN_ISR = 2
LAG_MS = 1_000
STEPS = 400
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=64, segment_index_bytes=4096, file_delete_delay_ms=0,
                   retention_ms=-1)


class Simulation:
    def __init__(self, root: Path, seed: int):
        self.rng = random.Random(seed)
        self.now = 1_000_000
        self.replicas = {
            r: Partition("t", 0, uuid.UUID(int=1), PartitionLog.open(str(root / f"r{r}"), "t", 0, CONFIG,
                                                                      now_ms=self.now),
                         r, 0, 0, REPLICAS, REPLICAS, MIN_ISR)
            for r in REPLICAS}
        self.leader = 0
        self.epoch = 0
        self.replicas[0].make_leader(leader_epoch=0, replicas=REPLICAS, isr=REPLICAS, zk_version=0, now_ms=self.now)
        for r in (1, 2):
            self.replicas[r].make_follower(leader_id=0, leader_epoch=0, replicas=REPLICAS, isr=REPLICAS, zk_version=0)
        self.pending: dict[int, bytes] = {}  # last offset + 1 -> value, waiting for acks=all
        self.acked: dict[int, bytes] = {}  # offset -> value
        self.high_watermarks = {r: 0 for r in REPLICAS}
        self.sequence = 0

    @property
    def lead(self) -> Partition:
        return self.replicas[self.leader]

    def step(self) -> None:
        action = self.rng.choices(["produce", "fetch", "tick", "shrink", "elect"], [5, 8, 2, 1, 1])[0]
        getattr(self, action)()
        self.complete_acks()
        self.check_high_watermarks()
        if action == "elect":
            self.check_acked_records()

    def produce(self) -> None:
        value = f"v{self.sequence}".encode()
        self.sequence += 1
        try:
            info = self.lead.append_as_leader(bytearray(build_batch([RecordInput(None, value)])), required_acks=-1,
                                              now_ms=self.now)
        except NotEnoughReplicasError:
            return
        self.pending[info.last_offset + 1] = value

    def fetch(self) -> None:
        follower = self.replicas[self.rng.choice([r for r in REPLICAS if r != self.leader])]
        offset = follower.log.log_end_offset
        self.lead.record_follower_fetch(follower.broker_id, offset, self.now)
        self.lead.maybe_advance_high_watermark()
        joining = self.lead.isr_to_add()
        if joining:
            self.lead.isr = self.lead.isr + joining
        info = self.lead.log.read(offset, self.rng.choice([200, 1 << 20]))
        records = info.slices.read() if info.slices is not None else b""
        follower.append_as_follower(records, leader_high_watermark=self.lead.log.high_watermark, now_ms=self.now)

    def tick(self) -> None:
        self.now += self.rng.randint(1, 2 * LAG_MS)

    def shrink(self) -> None:
        lagging = self.lead.isr_to_remove(self.now, LAG_MS)
        self.lead.isr = tuple(r for r in self.lead.isr if r not in lagging)
        self.lead.maybe_advance_high_watermark()

    def elect(self) -> None:
        """The leader goes away; the controller picks another ISR member (clean election only)."""
        candidates = [r for r in self.lead.isr if r != self.leader]
        if not candidates:
            return
        isr = self.lead.isr
        self.leader = self.rng.choice(candidates)
        self.epoch += 1
        self.pending.clear()  # the producer gets NOT_LEADER_OR_FOLLOWER for these and never counts them
        self.lead.make_leader(leader_epoch=self.epoch, replicas=REPLICAS, isr=isr, zk_version=0, now_ms=self.now)
        for r in REPLICAS:
            if r != self.leader:
                follower = self.replicas[r]
                follower.make_follower(leader_id=self.leader, leader_epoch=self.epoch, replicas=REPLICAS, isr=isr,
                                       zk_version=0)
                self.truncate(follower)

    def truncate(self, follower: Partition) -> None:
        """The fetcher's truncation rounds against the new leader's epoch cache (KIP-101 / KIP-279)."""
        done = follower.epoch_cache.latest_epoch < 0
        while not done:
            epoch, end = self.lead.epoch_cache.end_offset_for(follower.epoch_cache.latest_epoch,
                                                              self.lead.log.log_end_offset)
            done = truncate_to_leader(follower, epoch, end)

    def complete_acks(self) -> None:
        hw = self.lead.log.high_watermark
        for end in [end for end in self.pending if end <= hw]:
            value = self.pending.pop(end)
            if len(self.lead.isr) >= MIN_ISR:
                self.acked[end - 1] = value

    def check_high_watermarks(self) -> None:
        for r, partition in self.replicas.items():
            assert partition.log.high_watermark >= self.high_watermarks[r], f"HW of replica {r} went down"
            self.high_watermarks[r] = partition.log.high_watermark

    def check_acked_records(self) -> None:
        log = {}
        offset = 0
        while offset < self.lead.log.log_end_offset:
            data = self.lead.log.read(offset, 1 << 20).slices
            assert data is not None
            for batch in iter_batches(data.read()):
                for record in batch.records():
                    log[record.offset] = record.value
                offset = batch.last_offset + 1
        for offset, value in self.acked.items():
            assert log.get(offset) == value, f"acknowledged record at offset {offset} lost"


@pytest.mark.parametrize("seed", range(12))
def test_high_watermark_and_acknowledged_records_survive_leader_changes(tmp_path: Path, seed: int) -> None:
    simulation = Simulation(tmp_path, seed)
    for _ in range(STEPS):
        simulation.step()
    simulation.check_acked_records()
    assert simulation.acked, "the simulation acknowledged nothing: the check would prove nothing"
    assert simulation.epoch > 0, "no leader change happened"
