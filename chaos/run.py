"""Rounds: start a cluster, run the workload under a fault schedule, heal, drain, check.

`python -m chaos --rounds 20 --duration 60 --seed 1` (or `make chaos CHAOS_ARGS=...`). Each round
prints its seed, schedule and verdict; a failing round's history (JSON lines) and broker logs are
kept under --keep-dir for inspection, and `python -m chaos --check <history.jsonl>` re-checks one.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import faults
from chaos.checker import Report, check
from chaos.cluster import ChaosCluster, wait_for
from chaos.history import History, read_jsonl
from chaos.provenance import LogProvenance
from chaos.workload import CTP_TOPIC, QUEUE_TOPIC, TXN_TOPIC, Workload, create_topics, drain

HEALTHY_TIMEOUT = 120.0
EXPECTED_LOSS = "loss detected (expected)"


@dataclass
class RoundResult:
    seed: int
    schedule: list[faults.Fault]
    verdict: str
    report: Report
    unavailable: dict[str, float] = field(default_factory=dict)
    kept: Path | None = None

    @property
    def ok(self) -> bool:
        return self.verdict in ("clean", EXPECTED_LOSS)


def under_replicated(cluster: ChaosCluster, topics: list[str]) -> list[str]:
    """What keeps `topics` (and the internal topics) from every partition having a leader and its full ISR."""
    meta = cluster.admin().list_topics(timeout=5)
    problems = [f"broker {b.broker_id} not registered" for b in cluster.brokers if b.broker_id not in meta.brokers]
    internal = [name for name in ("__consumer_offsets", "__transaction_state") if name in meta.topics]
    for name in topics + internal:
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None:
            problems.append(f"{name}: {topic.error if topic else 'missing'}")
            continue
        for partition in topic.partitions.values():
            if partition.leader < 0 or partition.error is not None or \
                    sorted(partition.isrs) != sorted(partition.replicas):
                problems.append(f"{name}-{partition.id}: leader {partition.leader} replicas {partition.replicas} "
                                f"isr {partition.isrs} error {partition.error}")
    return problems


def wait_replicated(cluster: ChaosCluster, topics: list[str], what: str) -> None:
    try:
        wait_for(lambda: not under_replicated(cluster, topics), what, HEALTHY_TIMEOUT)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}: {under_replicated(cluster, topics)}") from None


def longest_unavailability(events: list[dict[str, Any]]) -> dict[str, float]:
    """Per fault kind, the longest gap between successive acks that overlaps one of its windows."""
    acks = sorted(e["t"] for e in events if e["type"] == "ack")
    ends = {e["started"]: e["t"] for e in events if e["type"] == "fault" and e["phase"] == "end"}
    worst: dict[str, float] = {}
    for e in events:
        if e["type"] != "fault" or e["phase"] != "start":
            continue
        start, end = e["t"], ends.get(e["t"], e["t"])
        points = [start] + [t for t in acks if start < t] + [float("inf")]
        gap = 0.0
        for before, after in zip(points, points[1:]):
            if before > end:
                break
            gap = max(gap, min(after, end + 60.0) - before)
        worst[e["kind"]] = max(worst.get(e["kind"], 0.0), round(gap, 1))
    return worst


def run_round(seed: int, duration: float, *, brokers: int = 3, partitions: int = 3, expect_loss: bool = False,
              with_txn: bool = False, keep_dir: Path | None = None, log=print) -> RoundResult:
    rng = random.Random(seed)
    plan = faults.expected_loss_schedule() if expect_loss else faults.schedule(seed, duration)
    log(f"round seed={seed} duration={duration:.0f}s brokers={brokers} unclean={expect_loss} txn={with_txn}")
    for fault in plan:
        log(f"  {fault.describe()}")
    root = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    history = History()
    topics = [QUEUE_TOPIC] + ([TXN_TOPIC, CTP_TOPIC] if with_txn else [])
    cluster = ChaosCluster(root, brokers, {"unclean.leader.election.enable": str(expect_loss).lower()})
    verdict = "error"
    report = Report()
    try:
        cluster.start()
        create_topics(cluster.admin(), partitions, expect_loss, with_txn)
        wait_replicated(cluster, topics, "topics to be replicated")
        history = History()
        workload = Workload(history, cluster.bootstrap, partitions, seed, with_txn=with_txn)
        workload.start(time.monotonic() + duration + HEALTHY_TIMEOUT + 60)
        try:
            for fault in plan:
                time.sleep(max(0.0, fault.at - history.now()))
                faults.apply(cluster, fault, history, rng)
            time.sleep(max(0.0, duration - history.now()))
            history.add("heal")
            cluster.heal()
            wait_replicated(cluster, topics, "every partition's full ISR")
            history.add("healthy")
            time.sleep(2.0)  # the consumers read the tail
        finally:
            workload.stop()
        drain(history, cluster.bootstrap, topics, partitions, 60.0)
        report = check(history.snapshot(), LogProvenance.of_round(root).stamp)
        if expect_loss:
            verdict = EXPECTED_LOSS if report.anomalies["lost"] else "no loss (loss was expected!)"
        else:
            verdict = "clean" if report.clean else "anomalies: " + json.dumps(report.counts())
    except Exception as exc:  # noqa: BLE001 - a round that cannot finish is a verdict too
        verdict = f"error: {type(exc).__name__}: {exc}"
        history.add("error", error=verdict)
    finally:
        cluster.stop()
    result = RoundResult(seed, plan, verdict, report, longest_unavailability(history.snapshot()))
    history.dump(root / "history.jsonl")
    if result.ok or keep_dir is None:
        shutil.rmtree(root, ignore_errors=True)
    else:
        keep_dir.mkdir(parents=True, exist_ok=True)
        result.kept = keep_dir / root.name
        shutil.move(str(root), result.kept)
    for e in history.snapshot():
        if e["type"] == "fault" and e["phase"] == "start":
            log(f"  at {e['t']:5.1f}s {e['kind']}({e['target']}) hit brokers {e['brokers']}")
        elif e["type"] == "fault" and e.get("lost_bytes"):
            log(f"  at {e['t']:5.1f}s {e['kind']} cut unsynced bytes: {e['lost_bytes']}")
    log(f"  verdict: {verdict}  stats={report.stats}")
    if report.explained:
        log("  explained (a client's documented behaviour, not a broker anomaly): "
            + json.dumps({name: len(found) for name, found in report.explained.items()}))
        log("    " + json.dumps(report.summary()["explained"])[:1000])
    if not report.clean:
        log("  examples: " + json.dumps(report.summary()["examples"])[:2000])
    log(f"  longest unavailability (s): {result.unavailable}")
    if result.kept:
        log(f"  history kept: {result.kept}/history.jsonl")
    return result


def table(results: list[RoundResult]) -> str:
    lines = ["| seed | faults | outcome | longest unavailability (s) |", "|---|---|---|---|"]
    for r in results:
        kinds = ", ".join(f"{f.kind}({f.target})" for f in r.schedule)
        lines.append(f"| {r.seed} | {kinds} | {r.verdict} | {r.unavailable} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults per round")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="first round's seed")
    parser.add_argument("--brokers", type=int, default=3, choices=(3, 5))
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--txn", action="store_true", help="add the transactional workload")
    parser.add_argument("--no-expected-loss", action="store_true",
                        help="skip the final unclean-election + power-loss round (where loss must be detected)")
    parser.add_argument("--keep-dir", type=Path, default=Path("chaos-runs"))
    parser.add_argument("--check", type=Path, help="only re-check a kept history.jsonl")
    args = parser.parse_args(argv)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # ZooKeeper start-up polling is noisy
    # SIGTERM unwinds like Ctrl-C, so the round's `finally` kills its brokers (paused ones included).
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(128 + signal.SIGTERM))
    if args.check:
        report = check(read_jsonl(args.check), LogProvenance.of_round(args.check.parent).stamp)
        print(json.dumps(report.summary(), indent=1))
        return 0 if report.clean else 1
    results = [run_round(args.seed + i, args.duration, brokers=args.brokers, partitions=args.partitions,
                         with_txn=args.txn, keep_dir=args.keep_dir) for i in range(args.rounds)]
    if not args.no_expected_loss:
        results.append(run_round(args.seed + args.rounds, 20.0, brokers=3, partitions=args.partitions,
                                 expect_loss=True, keep_dir=args.keep_dir))
    print(table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
