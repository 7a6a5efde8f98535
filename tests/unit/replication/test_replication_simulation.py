"""A seeded simulation of one partition on three replicas: appends, follower fetches, ISR changes and
leader changes, driven by one random generator and a manual clock, over real logs and the real
`Partition`, ISR/high-watermark rules and fetcher truncation.

ZooKeeper is modelled as the stored ISR and its version. A leader's ISR change is a write in flight
(`Partition.pending_isr`) that lands in a later step, or fails if the controller wrote meanwhile.
The controller elects from the stored ISR. A restart loses an unflushed tail of the replica's log;
the controller handles it as a failure then a start-up (KIP-380): the replica leaves the stored ISR
and, if it led, leadership moves to another ISR member; every replica sees a new leader epoch.

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
STEPS = 800
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
        self.stored_isr, self.stored_version = REPLICAS, 0  # the partition state znode
        self.in_flight: tuple[int, tuple[int, ...], int] | None = None  # leader epoch, ISR, expected version

    @property
    def lead(self) -> Partition:
        return self.replicas[self.leader]

    def step(self) -> None:
        action = self.rng.choices(["produce", "fetch", "tick", "shrink", "isr_write", "elect", "restart"],
                                  [5, 8, 2, 2, 1, 2, 1])[0]
        getattr(self, action)()
        self.complete_acks()
        self.check_high_watermarks()
        if action in ("elect", "restart"):
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
        joining = self.lead.isr_to_add(follower.broker_id)
        if joining and not self.lead.isr_update_pending:
            self.start_isr_write(self.lead.isr + joining)
        info = self.lead.log.read(offset, self.rng.choice([200, 1 << 20]))
        records = info.slices.read() if info.slices is not None else b""
        follower.append_as_follower(records, leader_high_watermark=self.lead.log.high_watermark, now_ms=self.now)

    def tick(self) -> None:
        self.now += self.rng.randint(1, 2 * LAG_MS)

    def shrink(self) -> None:
        lagging = self.lead.isr_to_remove(self.now, LAG_MS)
        if lagging and not self.lead.isr_update_pending:
            self.start_isr_write(tuple(r for r in self.lead.isr if r not in lagging))

    def start_isr_write(self, isr: tuple[int, ...]) -> None:
        """What ReplicaManager._change_isr does: the ISR is pending until the write lands."""
        self.lead.pending_isr = isr
        self.in_flight = (self.epoch, isr, self.lead.zk_version)
        self.lead.maybe_advance_high_watermark()

    def isr_write(self) -> None:
        """The leader's conditional write reaches ZooKeeper (and its answer the leader)."""
        if self.in_flight is None:
            return
        epoch, isr, version = self.in_flight
        self.in_flight = None
        self.lead.pending_isr = None
        if epoch != self.epoch or version != self.stored_version:
            return  # the controller wrote meanwhile: the leader waits for its LeaderAndIsr
        self.stored_isr, self.stored_version = isr, self.stored_version + 1
        self.lead.isr, self.lead.zk_version = isr, self.stored_version
        self.lead.maybe_advance_high_watermark()

    def elect(self) -> None:
        """The leader goes away; the controller picks another member of the stored ISR (clean election)."""
        candidates = [r for r in self.stored_isr if r != self.leader]
        if candidates:
            self.change_leader(self.rng.choice(candidates), self.stored_isr)

    def restart(self) -> None:
        """A replica restarts and loses an unflushed tail of its log. The controller sees a new broker
        epoch: the replica leaves the stored ISR (unless it is the last member: then acknowledged
        records may be lost, in Kafka too, so the simulation does not restart it) and, if it led,
        another ISR member leads."""
        r = self.rng.choice(REPLICAS)
        others = tuple(b for b in self.stored_isr if b != r)
        if not others:
            return
        restarted = self.replicas[r]
        restarted.truncate_to(self.rng.randint(restarted.log.log_start_offset, restarted.log.log_end_offset))
        self.high_watermarks[r] = restarted.log.high_watermark  # a restart re-reads the watermark
        self.change_leader(self.rng.choice(others) if r == self.leader else self.leader, others)

    def change_leader(self, leader: int, isr: tuple[int, ...]) -> None:
        """The controller's write of a new leader epoch, then its LeaderAndIsr to every replica."""
        if leader != self.leader:
            self.pending.clear()  # the producer gets NOT_LEADER_OR_FOLLOWER for these and never counts them
        self.leader = leader
        self.epoch += 1
        self.stored_isr, self.stored_version = isr, self.stored_version + 1
        self.in_flight = None
        self.lead.make_leader(leader_epoch=self.epoch, replicas=REPLICAS, isr=isr, zk_version=self.stored_version,
                              now_ms=self.now)
        for r in REPLICAS:
            if r != self.leader:
                follower = self.replicas[r]
                follower.make_follower(leader_id=self.leader, leader_epoch=self.epoch, replicas=REPLICAS, isr=isr,
                                       zk_version=self.stored_version)
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


@pytest.mark.parametrize("seed", range(24))
def test_high_watermark_and_acknowledged_records_survive_leader_changes(tmp_path: Path, seed: int) -> None:
    simulation = Simulation(tmp_path, seed)
    for _ in range(STEPS):
        simulation.step()
    simulation.check_acked_records()
    assert simulation.acked, "the simulation acknowledged nothing: the check would prove nothing"
    assert simulation.epoch > 0, "no leader change happened"


def test_a_follower_joining_the_isr_holds_the_high_watermark_while_the_write_is_in_flight(tmp_path: Path) -> None:
    """The history the simulation finds at seed 18 without the maximal ISR, in four steps: follower 2
    qualifies to rejoin at the high watermark; before its ISR write lands the leader appends and follower
    1 catches up. Counting only the committed ISR {0, 1} would move the watermark past follower 2, which
    then joins below it and could be elected without an acknowledged record (Kafka counts the maximal ISR)."""
    simulation = Simulation(tmp_path, 0)
    lead = simulation.lead
    simulation.stored_isr = lead.isr = (0, 1)
    simulation.produce()
    lead.record_follower_fetch(1, lead.log.log_end_offset, simulation.now)
    lead.maybe_advance_high_watermark()
    assert lead.log.high_watermark == 1
    lead.record_follower_fetch(2, 1, simulation.now)
    assert lead.isr_to_add(2) == (2,)
    simulation.start_isr_write((0, 1, 2))
    simulation.produce()
    lead.record_follower_fetch(1, lead.log.log_end_offset, simulation.now)
    lead.maybe_advance_high_watermark()
    assert lead.log.high_watermark == 1, "the high watermark passed a joining follower"
    simulation.isr_write()
    assert lead.isr == (0, 1, 2)
    lead.record_follower_fetch(2, lead.log.log_end_offset, simulation.now)
    assert lead.maybe_advance_high_watermark() and lead.log.high_watermark == 2


def test_no_acks_all_append_while_a_shrink_below_the_minimum_is_in_flight(tmp_path: Path) -> None:
    """Chaos (overlapping faults): the leader decided to drop its lagging follower from ISR {0, 1}, flushed its
    whole log (it would be the only member) and sent the shrink, which took seconds to land. Records appended
    meanwhile were acknowledged once the follower caught up, the shrink then landed, and the leader lost power:
    the only ISR member came back without them. While such a shrink is in flight acks=all appends are refused,
    so the flush covers all the leader will acknowledge; acks=1 appends, and a write that adds members, are
    not held back."""
    simulation = Simulation(tmp_path, 0)
    lead = simulation.lead
    simulation.stored_isr = lead.isr = (0, 1)
    simulation.start_isr_write((0,))
    batch = build_batch([RecordInput(None, b"v")])
    with pytest.raises(NotEnoughReplicasError):
        lead.append_as_leader(bytearray(batch), required_acks=-1, now_ms=simulation.now)
    lead.append_as_leader(bytearray(batch), required_acks=1, now_ms=simulation.now)
    simulation.isr_write()
    simulation.start_isr_write((0, 1, 2))
    lead.isr = (0, 1)
    lead.append_as_leader(bytearray(batch), required_acks=-1, now_ms=simulation.now)
