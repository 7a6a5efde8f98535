"""The history checker: rebuilds each partition's offset -> value order from every acknowledged send
and every read, and names what a Kafka log must never show.

Events it reads (history.py; `topic`/`partition`/`offset`/`value` where they apply):
  ack      a send the broker acknowledged at (partition, offset); offset None when librdkafka knows the
           message was persisted but not where (an idempotent retry): judged for loss only. `key` on a
           compacted topic's; `txn` on a transaction's (committed or aborted, it must stay in the log)
  poll     a group consumer's read (process = the consumer, `group` its group)
  read     the final read_committed drain's read, from offset 0 after everything healed
  read-uncommitted
           the read_uncommitted drain's, of the transactional topics
  assign   a consumer got partitions (its poll order restarts there)
  commit   a group commit that succeeded: offsets {partition: next offset}
  txn      a transaction's values and outcome: "commit" (all must be read), "abort" (none may be read),
           "unknown" (in doubt: all or none); consume-transform-produce outputs name their input: no
           input in two committed outputs
  drain    a drain's end: `complete` false when it could not read every partition to its end
  fail     a send the client gave up on (librdkafka's local message timeout among them)
  epoch-bump  librdkafka's log line deciding to bump a queue producer's epoch (`detail`: its reason)

On a compacted topic an acknowledged value may be missing from the drain only if the drain holds a
later record of its key in its partition. A group's commit of offset O says it consumed everything
below O: every record the drain read below O must have been polled by a member of the group before
the commit (`skipped` otherwise). The replica comparison (replicas.py) adds `replica_divergent`.

Given the round's segment files (provenance.py), a duplicate whose later copy carries a higher epoch
of the same producer id, from a producer that bumped its epoch (a local message timeout, or a bump
its librdkafka log recorded) before the value was acknowledged, is librdkafka re-sending a possibly
persisted message under the new epoch from sequence 0, which no broker can deduplicate (librdkafka
#4953): reported as `duplicate_epoch_bump` with the bump's reasons, not as an anomaly. On a compacted
topic the cleaner may have removed the copies from every log before it was read; the bump alone then
explains them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable

from chaos.provenance import ProducerStamp

EXAMPLES = 5
CTP_PREFIX = "x"  # consume-transform-produce outputs are f"x{attempt}:{input}"
ANOMALIES = ("lost", "duplicate", "divergent", "poll_backwards", "commit_backwards", "aborted_read",
             "partial_txn", "skipped", "replica_divergent", "drain_incomplete")

TopicPartition = tuple[str, int]
Place = tuple[str, int, int]
StampOf = Callable[[str, int, int], ProducerStamp | None]
LOCAL_TIMEOUT = "_MSG_TIMED_OUT"


@dataclass
class Report:
    anomalies: dict[str, list[Any]] = field(default_factory=lambda: {name: [] for name in ANOMALIES})
    stats: dict[str, int] = field(default_factory=dict)
    explained: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, name: str, example: Any) -> None:
        self.anomalies[name].append(example)

    @property
    def clean(self) -> bool:
        return not any(self.anomalies.values())

    def counts(self) -> dict[str, int]:
        return {name: len(found) for name, found in self.anomalies.items() if found}

    def explain(self, name: str, example: Any) -> None:
        """Something that looks like an anomaly but is a client's documented behaviour."""
        self.explained.setdefault(name, []).append(example)

    def summary(self) -> dict[str, Any]:
        return {"counts": self.counts(), "stats": self.stats,
                "examples": {name: found[:EXAMPLES] for name, found in self.anomalies.items() if found},
                "explained": {name: found[:EXAMPLES] for name, found in self.explained.items()}}


def check(events: Iterable[dict[str, Any]], stamp_of: StampOf | None = None,
          compacted: Collection[str] = ()) -> Report:
    """`stamp_of(topic, partition, offset)` names the producer of an offset (from the segment files);
    without it every duplicate is an anomaly. `compacted`: the topics whose cleaner may remove records."""
    report = Report()
    events = list(events)
    acks = [e for e in events if e["type"] == "ack"]
    polls = [e for e in events if e["type"] == "poll"]
    reads = [e for e in events if e["type"] == "read"]
    uncommitted = [e for e in events if e["type"] == "read-uncommitted"]
    txns = [e for e in events if e["type"] == "txn"]
    aborted = {v for t in txns if t["outcome"] == "abort" for v in t["values"]}
    transactional = {v for t in txns for v in t["values"]} | {e["value"] for e in acks if e.get("txn")}

    at_offset: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    where: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for e in acks + polls + reads + uncommitted:
        if e["offset"] is None:  # librdkafka acks a message it learnt was persisted without its offset
            continue
        place = (e["topic"], e["partition"], e["offset"])
        at_offset[place].add(e["value"])
        where[e["value"]].add(place)
    for place, values in sorted(at_offset.items()):
        if len(values) > 1:
            report.add("divergent", {"topic": place[0], "partition": place[1], "offset": place[2],
                                     "values": sorted(values)})
    acked_at = {e["value"]: e["t"] for e in acks}
    for value, places in sorted(where.items()):
        if len(places) > 1:
            stamps = _epoch_bumped(sorted(places), stamp_of)
            source = _ctp_source(value)
            cleaned = stamps is None and _cleaned_away(sorted(places), stamp_of, compacted)
            bumps = _bumps_before(events, value, acked_at.get(value)) if stamps or cleaned else []
            if bumps:
                report.explain("duplicate_epoch_bump", {"value": value, "at": sorted(places), "stamps": stamps,
                                                        "bumped_by": bumps[:3]})
            elif source is not None and len(places) <= len(where.get(source, ())):
                report.explain("output_per_input_copy", {"value": value, "at": sorted(places),
                                                         "input_at": sorted(where[source])})
            else:
                report.add("duplicate", {"value": value, "at": sorted(places)})

    drained = {e["value"] for e in reads}
    superseded = _superseded(reads, compacted)
    compacted_away = 0
    for e in acks:
        if e["value"] in transactional or e["value"] in drained:
            continue  # a transaction's values are judged with it below
        if e["topic"] in compacted and superseded(e):
            compacted_away += 1
            continue
        report.add("lost", {"value": e["value"], "topic": e["topic"], "partition": e["partition"],
                            "offset": e["offset"], "acked_at": e["t"]})
    if any(e["type"] == "drain" and e.get("process") == "drain-uncommitted" for e in events):
        in_log = {e["value"] for e in uncommitted}
        for e in acks:
            if e.get("txn") and e["value"] not in in_log:
                report.add("lost", {"value": e["value"], "topic": e["topic"], "partition": e["partition"],
                                    "offset": e["offset"], "acked_at": e["t"], "read": "read_uncommitted"})
    for t in txns:
        seen = [v for v in t["values"] if v in drained]
        if t["outcome"] == "commit" and len(seen) < len(t["values"]):
            name = "partial_txn" if seen else "lost"
            report.add(name, {"txn": t["txn"], "process": t["process"], "values": t["values"], "seen": seen})
        elif t["outcome"] == "unknown" and 0 < len(seen) < len(t["values"]):
            report.add("partial_txn", {"txn": t["txn"], "process": t["process"], "values": t["values"],
                                       "seen": seen, "outcome": "unknown"})
    _check_exactly_once(txns, where, report)
    for e in polls + reads:
        if e["value"] in aborted:
            report.add("aborted_read", {"value": e["value"], "process": e["process"], "partition": e["partition"],
                                        "offset": e["offset"]})

    _check_poll_order(events, report)
    _check_commit_order(events, report)
    _check_skipped(events, reads, report)
    for e in events:
        if e["type"] == "drain" and not e["complete"]:
            report.add("drain_incomplete", {"process": e.get("process", "drain"), "behind": e.get("behind"),
                                            "unknown": e.get("unknown")})
    outcomes = [t["outcome"] for t in txns]
    report.stats = {"acked": len(acks), "polled": len(polls), "drained": len(drained), "compacted_away": compacted_away,
                    "failed_sends": sum(e["type"] == "fail" for e in events),
                    "commits": sum(e["type"] == "commit" for e in events),
                    "txns": len(txns), "aborted_txns": outcomes.count("abort"),
                    "unknown_txns": outcomes.count("unknown"),
                    "aborted_in_log": len(aborted & {e["value"] for e in uncommitted})}
    return report


def _superseded(reads: list[dict[str, Any]], compacted: Collection[str]) -> Callable[[dict[str, Any]], bool]:
    """Whether the drain holds a later record of an ack's key in its partition (the cleaner may then have
    removed the ack's record); an ack without an offset is covered by any record of its key."""
    latest: dict[tuple[str, int, str | None], int] = {}
    for e in reads:
        if e["topic"] in compacted and "key" in e:
            place = (e["topic"], e["partition"], e["key"])
            latest[place] = max(latest.get(place, -1), e["offset"])

    def superseded(ack: dict[str, Any]) -> bool:
        last = latest.get((ack["topic"], ack["partition"], ack.get("key")))
        return last is not None and (ack["offset"] is None or last > ack["offset"])
    return superseded


def _epoch_bumped(places: list[Place], stamp_of: StampOf | None) -> list[list[int]] | None:
    """[[producer id, epoch, sequence], ...] of the copies when they are in one partition, from one producer
    id, each later copy under a higher epoch; None otherwise (or when the logs cannot say)."""
    if stamp_of is None or len({(topic, partition) for topic, partition, _ in places}) != 1:
        return None
    found = [stamp_of(*place) for place in places]
    stamps = [s for s in found if s is not None]
    if len(stamps) < len(found) or any(s.producer_id < 0 for s in stamps):
        return None
    if len({s.producer_id for s in stamps}) != 1:
        return None
    epochs = [s.producer_epoch for s in stamps]
    if any(later <= earlier for earlier, later in zip(epochs, epochs[1:])):
        return None
    return [[s.producer_id, s.producer_epoch, s.sequence] for s in stamps]


def _cleaned_away(places: list[Place], stamp_of: StampOf | None, compacted: Collection[str]) -> bool:
    """Copies in one partition of a compacted topic whose producer stamps the logs no longer hold (the cleaner
    removed a copy behind a later record of its key before the round's logs were read): a producer's
    recorded epoch bump is then the only evidence, and taken as enough."""
    topics = {(topic, partition) for topic, partition, _ in places}
    if stamp_of is None or len(topics) != 1 or next(iter(topics))[0] not in compacted:
        return False
    return any(stamp_of(*place) is None for place in places)


def _ctp_source(value: str) -> str | None:
    """The input a consume-transform-produce output was made from (outputs are f"x{attempt}:{input}")."""
    if value.startswith(CTP_PREFIX) and ":" in value:
        return value.split(":", 1)[1]
    return None


def _bumps_before(events: list[dict[str, Any]], value: str, acked_at: float | None) -> list[str]:
    """Why the value's producer bumped its epoch before the value was acknowledged: its local message
    timeouts and the epoch-bump lines of its librdkafka log; empty when nothing made it bump."""
    process = value.rsplit("-", 1)[0]
    reasons = []
    for e in events:
        if e.get("process") != process or (acked_at is not None and e["t"] > acked_at):
            continue
        if e["type"] == "fail" and LOCAL_TIMEOUT in e.get("error", ""):
            reasons.append(f"local timeout of {e['value']} at {e['t']} s")
        elif e["type"] == "epoch-bump":
            reasons.append(f"at {e['t']} s: {e['detail']}")
    return reasons


def _check_exactly_once(txns: list[dict[str, Any]], where: dict[str, set[Place]], report: Report) -> None:
    """Consume-transform-produce: an input value is in the outputs of at most one committed transaction
    per copy of the input in the log (outputs are f"x{attempt}:{input}"; an input transformed again after
    an abort has a new attempt; an input the producer duplicated is transformed once per copy)."""
    outputs: dict[str, list[str]] = defaultdict(list)
    for t in txns:
        if t["outcome"] == "commit":
            for value in t["values"]:
                source = _ctp_source(value)
                if source is not None:
                    outputs[source].append(value)
    for source, produced in sorted(outputs.items()):
        if len(produced) > max(1, len(where.get(source, ()))):
            report.add("duplicate", {"input": source, "outputs": produced})


def _check_poll_order(events: list[dict[str, Any]], report: Report) -> None:
    """Within one assignment, a consumer's offsets in a partition only go forward."""
    last: dict[tuple[str, TopicPartition], int] = {}
    for e in events:
        if e["type"] == "assign":
            for topic, partition in e["partitions"]:
                last.pop((e["process"], (topic, partition)), None)
        elif e["type"] in ("poll", "read", "read-uncommitted"):
            key = (e["process"], (e["topic"], e["partition"]))
            previous = last.get(key)
            if previous is not None and e["offset"] <= previous:
                report.add("poll_backwards", {"process": e["process"], "topic": e["topic"],
                                              "partition": e["partition"], "from": previous, "to": e["offset"],
                                              "t": e["t"]})
            last[key] = e["offset"]


def _check_commit_order(events: list[dict[str, Any]], report: Report) -> None:
    """A group's committed offset for a partition never moves back."""
    last: dict[tuple[str, str, int], int] = {}
    for e in events:
        if e["type"] != "commit":
            continue
        for partition, offset in e["offsets"].items():
            key = (e.get("group", ""), e["topic"], int(partition))
            previous = last.get(key)
            if previous is not None and offset < previous:
                report.add("commit_backwards", {"process": e["process"], "group": e.get("group"), "topic": e["topic"],
                                                "partition": int(partition), "from": previous, "to": offset,
                                                "t": e["t"]})
            last[key] = max(offset, previous or offset)


def _check_skipped(events: list[dict[str, Any]], reads: list[dict[str, Any]], report: Report) -> None:
    """A group that committed offset O of a partition consumed everything below it: each offset the drain
    read below O was polled by a member of the group before the commit."""
    first_poll: dict[tuple[str, str, int, int], float] = {}
    for e in events:
        if e["type"] == "poll":
            first_poll.setdefault((e.get("group", ""), e["topic"], e["partition"], e["offset"]), e["t"])
    drained: dict[tuple[str, int], list[int]] = defaultdict(list)
    for e in reads:
        drained[(e["topic"], e["partition"])].append(e["offset"])
    for offsets in drained.values():
        offsets.sort()
    latest_poll: dict[tuple[str, str, int], list[float]] = {}  # per drained offset: when all up to it were polled

    def polled_by(group: str, topic: str, partition: int) -> list[float]:
        key = (group, topic, partition)
        if key not in latest_poll:
            running, times = 0.0, []
            for offset in drained.get((topic, partition), []):
                running = max(running, first_poll.get((group, topic, partition, offset), float("inf")))
                times.append(running)
            latest_poll[key] = times
        return latest_poll[key]

    for e in events:
        if e["type"] != "commit":
            continue
        group = e.get("group", "")
        for text, committed in e["offsets"].items():
            partition = int(text)
            offsets = drained.get((e["topic"], partition), [])
            below = bisect_left(offsets, committed)
            if below and polled_by(group, e["topic"], partition)[below - 1] > e["t"]:
                missed = [o for o in offsets[:below] if first_poll.get((group, e["topic"], partition, o),
                                                                       float("inf")) > e["t"]]
                report.add("skipped", {"group": group, "process": e["process"], "topic": e["topic"],
                                       "partition": partition, "committed": committed, "t": e["t"],
                                       "never_polled": len(missed), "first": missed[0]})
