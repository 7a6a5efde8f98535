"""Which producer wrote an offset: the batch headers of a kept round's segment files.

The checker uses it to tell two kinds of duplicate apart. Two copies of a value under the same
producer id and epoch are a broker bug (idempotence must have refused the second). Two copies where the
later one carries a higher epoch of the same producer id are librdkafka's idempotence limit: after a
local message timeout it bumps the epoch, restarts the sequence at 0 and re-sends messages whose
earlier request may have been written (librdkafka #4953); Kafka cannot deduplicate across epochs either.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from pybroker.records import iter_batches

__all__ = ["ProducerStamp", "LogProvenance"]


@dataclass(frozen=True)
class ProducerStamp:
    producer_id: int
    producer_epoch: int
    sequence: int


@dataclass(frozen=True)
class _Batch:
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int


class LogProvenance:
    """Reads `<log dir>/<topic>-<partition>/*.log`: an offset's batch in the first log dir that still holds
    it (a compacted topic's replicas clean on their own schedules, so one may have removed an offset another
    keeps)."""

    def __init__(self, log_dirs: list[Path]) -> None:
        self._log_dirs = log_dirs
        self._batches: dict[tuple[str, int], list[list[_Batch]]] = {}

    @classmethod
    def of_round(cls, root: Path) -> "LogProvenance":
        """A kept chaos round: `<root>/broker-<id>/logs`."""
        return cls(sorted(root.glob("broker-*/logs")))

    def stamp(self, topic: str, partition: int, offset: int) -> ProducerStamp | None:
        for batches in self._partition(topic, partition):
            i = bisect_right([b.base_offset for b in batches], offset) - 1
            if i >= 0 and offset <= batches[i].last_offset:
                batch = batches[i]
                return ProducerStamp(batch.producer_id, batch.producer_epoch,
                                     batch.base_sequence + offset - batch.base_offset)
        return None

    def _partition(self, topic: str, partition: int) -> list[list[_Batch]]:
        key = (topic, partition)
        if key not in self._batches:
            self._batches[key] = [self._read(log_dir / f"{topic}-{partition}") for log_dir in self._log_dirs]
        return self._batches[key]

    @staticmethod
    def _read(directory: Path) -> list[_Batch]:
        batches = []
        for segment in sorted(directory.glob("*.log")):
            for batch in iter_batches(segment.read_bytes()):
                h = batch.header()
                batches.append(_Batch(h.base_offset, h.base_offset + h.last_offset_delta, h.producer_id,
                                      h.producer_epoch, h.base_sequence))
        return batches
