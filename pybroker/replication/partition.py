"""One partition replica hosted by this broker: its log, its role and the high-watermark rule.

Single-node rule (the only one until followers exist): the leader is the whole ISR, so the high
watermark moves to the log end offset after every append.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pybroker.log.log import AppendInfo, PartitionLog
from pybroker.replication.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    UnknownLeaderEpochError,
)


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    broker_id: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_insync_replicas: int = 1

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def check_leader_epoch(self, requested_epoch: int) -> None:
        """Kafka's current-leader-epoch check: -1 skips it, older is fenced, newer is unknown."""
        if requested_epoch < 0 or requested_epoch == self.leader_epoch:
            return
        if requested_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{self.topic}-{self.index}: epoch {requested_epoch} < {self.leader_epoch}")
        raise UnknownLeaderEpochError(f"{self.topic}-{self.index}: epoch {requested_epoch} > {self.leader_epoch}")

    def append_as_leader(self, batch: bytearray, *, required_acks: int, now_ms: int) -> AppendInfo:
        if not self.is_leader:
            raise NotLeaderError(f"Broker {self.broker_id} is not the leader of {self.topic}-{self.index}")
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the min.isr "
                f"requirement of {self.min_insync_replicas} for partition {self.topic}-{self.index}")
        info = self.log.append_as_leader(batch, leader_epoch=self.leader_epoch, now_ms=now_ms)
        if self.isr == (self.broker_id,):
            self.log.set_high_watermark(self.log.log_end_offset)
        return info
