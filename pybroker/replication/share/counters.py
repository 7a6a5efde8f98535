"""Counts of what a share-partition did, for the broker's Prometheus metrics (``server/share_metrics.py``).

A ``SharePartition`` owns one ``ShareCounters`` and bumps it where records change hands (acknowledgements are
counted by the handler, once they took effect); the counters live and
die with the share-partition, as Kafka's SharePartitionMetrics do, and are read when the metrics are scraped.
Plain integers: the partition code runs on the event loop, and so does a scrape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

__all__ = ["ACK_TYPE_NAMES", "ShareCounters"]

ACK_TYPE_NAMES = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}
"""Kafka's ``ackType`` tag of RecordAcknowledgementsPerSec, by AcknowledgementBatch type code (GAP is not counted)."""


@dataclass(slots=True)
class ShareCounters:
    acquired: int = 0
    """Records handed to a member (first deliveries and redeliveries)."""
    archived: int = 0
    """Records archived by a REJECT, or at the delivery count limit by a RELEASE or a lock timeout. Those of an
    acknowledgement are counted by the handler once its write is taken (a failed write undoes them); those of a lock
    timeout where it happens (no failed write undoes it)."""
    lock_timeouts: int = 0
    """Records whose acquisition lock ran out before they were acknowledged."""
    acknowledged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACK_TYPE_NAMES.values(), 0))
    """Records acknowledged, per Kafka ackType name: counted by the ShareFetch/ShareAcknowledge handler once the
    acknowledgement took effect (its state write taken, or a RENEW applied), never for one refused or undone."""

    def on_acknowledge(self, first: int, last: int, types: Sequence[int]) -> None:
        """Count one applied AcknowledgementBatch: one type for ``first..last``, or one type per offset."""
        if len(types) == 1:
            self._count(types[0], last - first + 1)
        else:
            for ack_type in types:
                self._count(ack_type, 1)

    def _count(self, ack_type: int, records: int) -> None:
        name = ACK_TYPE_NAMES.get(ack_type)
        if name is not None:
            self.acknowledged[name] += records
