"""The history checker: rebuilds each partition's offset -> value order from every acknowledged send
and every read, and names what a Kafka log must never show.

Events it reads (history.py; `topic`/`partition`/`offset`/`value` where they apply):
  ack      a send the broker acknowledged at (partition, offset); offset None when librdkafka knows the
           message was persisted but not where (an idempotent retry): judged for loss only
  poll     a group consumer's read (process = the consumer)
  read     the final drain's read, from offset 0 after everything healed
  assign   a consumer got partitions (its poll order restarts there)
  commit   a group commit that succeeded: offsets {partition: next offset}
  txn      a transaction's values and outcome ("commit" / "abort"; unknown ones are not judged);
           consume-transform-produce outputs name their input: no input in two committed outputs
  drain    the drain's end: `complete` false when it could not read every partition to its end
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

EXAMPLES = 5
CTP_PREFIX = "x"  # consume-transform-produce outputs are f"x{attempt}:{input}"
ANOMALIES = ("lost", "duplicate", "divergent", "poll_backwards", "commit_backwards", "aborted_read",
             "partial_txn", "drain_incomplete")

TopicPartition = tuple[str, int]


@dataclass
class Report:
    anomalies: dict[str, list[Any]] = field(default_factory=lambda: {name: [] for name in ANOMALIES})
    stats: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, example: Any) -> None:
        self.anomalies[name].append(example)

    @property
    def clean(self) -> bool:
        return not any(self.anomalies.values())

    def counts(self) -> dict[str, int]:
        return {name: len(found) for name, found in self.anomalies.items() if found}

    def summary(self) -> dict[str, Any]:
        return {"counts": self.counts(), "stats": self.stats,
                "examples": {name: found[:EXAMPLES] for name, found in self.anomalies.items() if found}}


def check(events: Iterable[dict[str, Any]]) -> Report:
    report = Report()
    events = list(events)
    acks = [e for e in events if e["type"] == "ack"]
    polls = [e for e in events if e["type"] == "poll"]
    reads = [e for e in events if e["type"] == "read"]
    txns = [e for e in events if e["type"] == "txn"]
    aborted = {v for t in txns if t["outcome"] == "abort" for v in t["values"]}
    committed_txn_values = {v for t in txns if t["outcome"] == "commit" for v in t["values"]}
    transactional = aborted | committed_txn_values | {v for t in txns for v in t["values"]}

    at_offset: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    where: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for e in acks + polls + reads:
        if e["offset"] is None:  # librdkafka acks a message it learnt was persisted without its offset
            continue
        place = (e["topic"], e["partition"], e["offset"])
        at_offset[place].add(e["value"])
        where[e["value"]].add(place)
    for place, values in sorted(at_offset.items()):
        if len(values) > 1:
            report.add("divergent", {"topic": place[0], "partition": place[1], "offset": place[2],
                                     "values": sorted(values)})
    for value, places in sorted(where.items()):
        if len(places) > 1:
            report.add("duplicate", {"value": value, "at": sorted(places)})

    drained = {e["value"] for e in reads}
    for e in acks:
        if e["value"] in transactional:
            continue  # judged with its transaction below
        if e["value"] not in drained:
            report.add("lost", {"value": e["value"], "topic": e["topic"], "partition": e["partition"],
                                "offset": e["offset"], "acked_at": e["t"]})
    for t in txns:
        seen = [v for v in t["values"] if v in drained]
        if t["outcome"] == "commit" and len(seen) < len(t["values"]):
            name = "partial_txn" if seen else "lost"
            report.add(name, {"txn": t["txn"], "values": t["values"], "seen": seen})
    _check_exactly_once(txns, report)
    for e in polls + reads:
        if e["value"] in aborted:
            report.add("aborted_read", {"value": e["value"], "process": e["process"], "partition": e["partition"],
                                        "offset": e["offset"]})

    _check_poll_order(events, report)
    _check_commit_order(events, report)
    for e in events:
        if e["type"] == "drain" and not e["complete"]:
            report.add("drain_incomplete", {"behind": e.get("behind")})
    report.stats = {"acked": len(acks), "polled": len(polls), "drained": len(drained),
                    "failed_sends": sum(e["type"] == "fail" for e in events),
                    "commits": sum(e["type"] == "commit" for e in events),
                    "txns": len(txns), "aborted_txns": sum(t["outcome"] == "abort" for t in txns)}
    return report


def _check_exactly_once(txns: list[dict[str, Any]], report: Report) -> None:
    """Consume-transform-produce: an input value is in the outputs of at most one committed transaction
    (outputs are f"x{attempt}:{input}"; an input transformed again after an abort has a new attempt)."""
    outputs: dict[str, list[str]] = defaultdict(list)
    for t in txns:
        if t["outcome"] == "commit":
            for value in t["values"]:
                if value.startswith(CTP_PREFIX) and ":" in value:
                    outputs[value.split(":", 1)[1]].append(value)
    for source, produced in sorted(outputs.items()):
        if len(produced) > 1:
            report.add("duplicate", {"input": source, "outputs": produced})


def _check_poll_order(events: list[dict[str, Any]], report: Report) -> None:
    """Within one assignment, a consumer's offsets in a partition only go forward."""
    last: dict[tuple[str, TopicPartition], int] = {}
    for e in events:
        if e["type"] == "assign":
            for topic, partition in e["partitions"]:
                last.pop((e["process"], (topic, partition)), None)
        elif e["type"] in ("poll", "read"):
            key = (e["process"], (e["topic"], e["partition"]))
            previous = last.get(key)
            if previous is not None and e["offset"] <= previous:
                report.add("poll_backwards", {"process": e["process"], "topic": e["topic"],
                                              "partition": e["partition"], "from": previous, "to": e["offset"],
                                              "t": e["t"]})
            last[key] = e["offset"]


def _check_commit_order(events: list[dict[str, Any]], report: Report) -> None:
    """A group's committed offset for a partition never moves back."""
    last: dict[TopicPartition, int] = {}
    for e in events:
        if e["type"] != "commit":
            continue
        for partition, offset in e["offsets"].items():
            key = (e["topic"], int(partition))
            previous = last.get(key)
            if previous is not None and offset < previous:
                report.add("commit_backwards", {"process": e["process"], "topic": e["topic"],
                                                "partition": int(partition), "from": previous, "to": offset,
                                                "t": e["t"]})
            last[key] = max(offset, previous or offset)
