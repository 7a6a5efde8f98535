"""Power loss on a stopped broker's log dir: keep only what was fsynced, as Jepsen's LazyFS does.

What the broker is known to have fsynced is the `recovery-point-offset-checkpoint` (Kafka's text
format: version, count, then `topic partition offset` lines; the file is replaced atomically after
an fsync, so the file on disk is the synced one and a `*.tmp` beside it is an unsynced write). Each
partition's segments are cut back to the batch boundary at its recovery point: segments that start
at or past it are deleted, the one holding it is truncated, and the truncated segment's indexes are
deleted (they are not fsynced either; the broker rebuilds them). With Kafka's defaults
(`log.flush.interval.messages` = Long.MAX) nothing is flushed but at segment rolls, so this cuts
everything written since the last roll: only replication keeps acks=all data.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

RECOVERY_POINTS = "recovery-point-offset-checkpoint"
_PARTITION_DIR = re.compile(r"(.+)-(\d+)")
_BATCH_HEADER = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a v2 batch


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    if not path.exists():
        return {}
    lines = path.read_text().split("\n")
    entries = {}
    for line in lines[2:2 + int(lines[1])]:
        topic, partition, offset = line.split(" ")
        entries[(topic, int(partition))] = int(offset)
    return entries


def synced_length(segment: Path, keep_below: int) -> int:
    """Bytes of `segment` holding whole batches that end below offset `keep_below`."""
    data = segment.read_bytes()
    position = 0
    while position + 27 <= len(data):
        base, length = _BATCH_HEADER.unpack_from(data, position)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, position + 23)
        if base + delta >= keep_below or position + 12 + length > len(data):
            break
        position += 12 + length
    return position


def lose_unsynced_writes(log_dir: Path) -> dict[str, int]:
    """Cut every partition of `log_dir` back to its recovery point; bytes lost per partition."""
    for tmp in log_dir.glob("*.tmp"):
        tmp.unlink()
    recovery = read_checkpoint(log_dir / RECOVERY_POINTS)
    lost: dict[str, int] = {}
    for partition_dir in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        match = _PARTITION_DIR.fullmatch(partition_dir.name)
        if match is None:
            continue
        for tmp in partition_dir.glob("*.tmp"):
            tmp.unlink()
        point = recovery.get((match.group(1), int(match.group(2))), 0)
        segments = sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem))
        cut = 0
        for index, segment in enumerate(segments):
            base = int(segment.stem)
            size = segment.stat().st_size
            if base >= point and index > 0:
                cut += size
                for sibling in partition_dir.glob(f"{segment.stem}.*"):
                    sibling.unlink()
                continue
            keep = synced_length(segment, point)
            if keep < size:
                cut += size - keep
                with open(segment, "r+b") as f:
                    f.truncate(keep)
                for suffix in (".index", ".timeindex"):
                    (partition_dir / f"{segment.stem}{suffix}").unlink(missing_ok=True)
        if cut:
            lost[partition_dir.name] = cut
    return lost
