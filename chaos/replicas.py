"""Every replica's log compared offset by offset after the heal, from the round's segment files.

A follower that diverged from its leader is a finding even if it never leads again and no client
ever reads it: at the next failover it would. Records are compared by what a copy keeps (producer id
and epoch, control flag, key, value); on a compacted topic each replica's cleaner removes records on its
own schedule, so only the offsets both replicas still hold are compared (by control flag, key, value).
Log ends are compared for the partitions whose replicas never came level after the workload stopped.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Collection

from pybroker.records import iter_batches

_PARTITION_DIR = re.compile(r"(.+)-(\d+)")
TopicPartition = tuple[str, int]
Content = tuple[Any, ...]
EXAMPLES = 3


def partition_dirs(root: Path) -> dict[TopicPartition, dict[int, Path]]:
    """(topic, partition) -> broker id -> its directory, for every partition some broker holds."""
    found: dict[TopicPartition, dict[int, Path]] = defaultdict(dict)
    for log_dir in sorted(root.glob("broker-*/logs")):
        broker = int(log_dir.parent.name.removeprefix("broker-"))
        for directory in log_dir.iterdir():
            match = _PARTITION_DIR.fullmatch(directory.name)
            if directory.is_dir() and match:
                found[(match.group(1), int(match.group(2)))][broker] = directory
    return dict(found)


def segment_files(directory: Path) -> list[Path]:
    """A partition directory's ``.log`` segments in offset order."""
    return sorted(directory.glob("*.log"), key=lambda p: int(p.stem))


def log_end(directory: Path) -> int:
    """One past the last offset of the last whole batch (the segment's base offset when it is empty)."""
    for segment in reversed(segment_files(directory)):
        last = None
        for batch in iter_batches(segment.read_bytes()):
            h = batch.header()
            last = h.base_offset + h.last_offset_delta
        if last is not None:
            return last + 1
    segments = segment_files(directory)
    return int(segments[0].stem) if segments else 0


def uneven(root: Path) -> dict[str, dict[int, int]]:
    """The partitions whose replicas' log ends differ: name -> broker -> log end."""
    result = {}
    for (topic, partition), replicas in sorted(partition_dirs(root).items()):
        ends = {broker: log_end(directory) for broker, directory in replicas.items()}
        if len(set(ends.values())) > 1:
            result[f"{topic}-{partition}"] = ends
    return result


def wait_level(root: Path, timeout: float) -> dict[str, dict[int, int]]:
    """Wait (the workload stopped) until every partition's replicas end at the same offset; what still
    differs after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        differing = uneven(root)
        if not differing or time.monotonic() >= deadline:
            return differing
        time.sleep(0.5)


def records(directory: Path, compacted: bool) -> dict[int, Content]:
    """offset -> what a copy of that record keeps."""
    found: dict[int, Content] = {}
    for segment in segment_files(directory):
        for batch in iter_batches(segment.read_bytes()):
            h = batch.header()
            control = batch.is_control
            for record in batch.records():
                content = (control, record.key, record.value)
                found[record.offset] = content if compacted else (h.producer_id, h.producer_epoch, *content)
    return found


def compare(root: Path, compacted: Collection[str] = (), uneven_ends: dict[str, dict[int, int]] | None = None,
            internal: bool = True) -> list[dict[str, Any]]:
    """One finding per partition whose replicas differ: at an offset both hold (or, on a topic that is not
    compacted, that one holds and another should, below both ends), or in their log ends when they were
    still uneven (`uneven_ends`, from `wait_level`)."""
    findings = []
    for (topic, partition), replicas in sorted(partition_dirs(root).items()):
        if len(replicas) < 2 or (not internal and topic.startswith("__")):
            continue
        name = f"{topic}-{partition}"
        is_compacted = topic in compacted or topic.startswith("__")
        logs = {broker: records(directory, is_compacted) for broker, directory in sorted(replicas.items())}
        differences = _differences(logs, is_compacted)
        ends = (uneven_ends or {}).get(name)
        if differences or ends:
            findings.append({"partition": name, "differing_offsets": len(differences),
                             "examples": differences[:EXAMPLES], **({"log_ends": ends} if ends else {})})
    return findings


def _differences(logs: dict[int, dict[int, Content]], compacted: bool) -> list[dict[str, Any]]:
    """Offsets where the replicas disagree, with what each holds there (None: missing)."""
    bounds = [(min(log), max(log) + 1) for log in logs.values() if log]
    if not bounds:
        return []
    start, end = max(b[0] for b in bounds), min(b[1] for b in bounds)
    offsets = sorted({o for log in logs.values() for o in log if start <= o < end})
    found = []
    for offset in offsets:
        held = {broker: log.get(offset) for broker, log in logs.items()}
        present = [c for c in held.values() if c is not None]
        if len(set(present)) > 1 or (not compacted and len(present) < len(held)):
            found.append({"offset": offset, "replicas": {str(b): _short(c) for b, c in held.items()}})
    return found


def _short(content: Content | None) -> str | None:
    if content is None:
        return None
    return repr(content)[:120]
