"""Rounds: start a cluster, run the workload under a fault schedule, heal, drain, check.

`python -m chaos --rounds 20 --duration 60 --seed 1` (or `make chaos CHAOS_ARGS=...`). Each round
prints its seed, schedule and verdict; a failing round's history (JSON lines) and broker logs are
kept under --keep-dir for inspection, and `python -m chaos --check <history.jsonl>` re-checks one.

Every round is checked: a round whose cluster does not heal (no leader or no full ISR somewhere after
HEALTHY_TIMEOUT) still drains what leads and runs the checker, and its verdict names both. After the
drain, every replica's log is compared with the others' offset by offset (replicas.py).
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

from chaos import faults, replicas
from chaos.checker import ANOMALIES, Report, check
from chaos.cluster import REPO, ChaosCluster, wait_for
from chaos.drain import drain
from chaos.history import History, read_jsonl
from chaos.nemesis import Nemesis
from chaos.provenance import LogProvenance
from chaos.share_checker import SHARE_ANOMALIES, check_share
from chaos.share_state_log import archived, passed
from chaos.share_workload import SHARE_BROKER_CONFIG, SHARE_GROUP, ShareWorkload, state_reads
from chaos.watchdog import Bounded, RoundProcessError, run_bounded
from chaos.workload import CTP_TOPIC, TABLE_TOPIC, TXN_TOPIC, Workload, create_topics, topics_of
from tests.ports import restartable_port

HEALTHY_TIMEOUT = 120.0
FAULTS_END_TIMEOUT = 90.0  # composite faults may still be in their steps when the schedule's time is up
LEVEL_TIMEOUT = 15.0  # for the replicas to come level once the workload stopped
EXPECTED_LOSS = "loss detected (expected)"
HARNESS_HANG = "harness hang"
# Past a round's duration before the watchdog kills it: far beyond a round that ends (a 60 s round of the
# 20-round runs took ~100 s in all, heal and drains included), short enough that a hung run goes on.
ROUND_SLACK_S = 600.0
COMPACTED = (TABLE_TOPIC,)
# drain_incomplete and share_unacknowledged are liveness: a drain that gave up
SAFETY = (*(name for name in ANOMALIES if name != "drain_incomplete"),
          *(name for name in SHARE_ANOMALIES if name != "share_unacknowledged"))


@dataclass
class RoundResult:
    seed: int
    schedule: list[faults.Fault]
    verdict: str
    report: Report
    unavailable: dict[str, float] = field(default_factory=dict)
    unavailable_partitions: dict[str, float] = field(default_factory=dict)
    healed: bool = True
    kept: Path | None = None
    skipped: list[str] = field(default_factory=list)
    """The faults that found nothing to aim at and were not applied (``fault-skipped``: kind and why)."""

    @property
    def ok(self) -> bool:
        return self.verdict in ("clean", EXPECTED_LOSS)

    @property
    def caught(self) -> bool:
        """A safety anomaly was found (what a planted bug must produce)."""
        return any(self.report.anomalies.get(name) for name in SAFETY)

    @property
    def outcome(self) -> str:
        """The verdict, and the faults skipped: a clean round that skipped one did not test what it drew."""
        if not self.skipped:
            return self.verdict
        return f"{self.verdict}; {len(self.skipped)} fault(s) SKIPPED, not exercised: {'; '.join(self.skipped)}"


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


def wait_replicated(cluster: ChaosCluster, topics: list[str], what: str, history: History | None = None) -> None:
    """Wait for every partition's full ISR; with `history` (after the heal), brokers that exited meanwhile
    are started again, each time recorded as `revived`."""
    def replicated() -> bool:
        if history is not None:
            revived = cluster.revive()
            if revived:
                history.add("revived", brokers=revived)
        return not under_replicated(cluster, topics)

    try:
        wait_for(replicated, what, HEALTHY_TIMEOUT)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}: {under_replicated(cluster, topics)}") from None


def longest_unavailability(events: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """Per fault kind and per partition, the longest gap between a partition's successive acks that
    overlaps a fault's window (a gap still open is counted up to 60 s past the fault's end)."""
    acks: dict[str, list[float]] = {}
    for e in events:
        if e["type"] == "ack":
            acks.setdefault(f"{e['topic']}-{e['partition']}", []).append(e["t"])
    ends = {e.get("id", e["started"]): e["t"] for e in events if e["type"] == "fault" and e["phase"] == "end"}
    by_kind: dict[str, float] = {}
    by_partition: dict[str, float] = {}
    for e in events:
        if e["type"] != "fault" or e["phase"] != "start":
            continue
        start = e["t"]
        end = ends.get(e.get("id", start), start)
        for name, times in acks.items():
            points = [start] + [t for t in sorted(times) if start < t] + [float("inf")]
            gap = 0.0
            for before, after in zip(points, points[1:]):
                if before > end:
                    break
                gap = max(gap, min(after, end + 60.0) - before)
            gap = round(gap, 1)
            by_kind[e["kind"]] = max(by_kind.get(e["kind"], 0.0), gap)
            by_partition[name] = max(by_partition.get(name, 0.0), gap)
    return by_kind, dict(sorted(by_partition.items()))


def plan_of(seed: int, duration: float, *, partitions: int = 6, expect_loss: bool = False,
            generator: str = "overlapping", kinds: list[str] | None = None,
            with_share: bool = False) -> list[faults.Fault]:
    return faults.expected_loss_schedule() if expect_loss else \
        faults.schedule(seed, duration, kinds, generator=generator, partitions=partitions, share=with_share)


def run_round(seed: int, duration: float, *, brokers: int = 3, partitions: int = 6, expect_loss: bool = False,
              with_txn: bool = False, txn_version: int = 1, with_share: bool = False,
              generator: str = "overlapping",
              kinds: list[str] | None = None,
              code_root: Path = REPO, keep_dir: Path | None = None, keep_all: bool = False,
              root: Path | None = None, ports: list[int] | None = None, log=print) -> RoundResult:
    """One round, in this process; `root` is its directory (a new temporary one by default), `ports` its brokers'
    listeners (drawn at the cluster's start by default)."""
    plan = plan_of(seed, duration, partitions=partitions, expect_loss=expect_loss, generator=generator, kinds=kinds,
                   with_share=with_share)
    log(f"round seed={seed} duration={duration:.0f}s brokers={brokers} partitions={partitions} "
        f"schedule={'expected-loss' if expect_loss else generator} unclean={expect_loss} txn={with_txn}"
        + (f" txn-version={txn_version}" if with_txn else "")
        + ("" if code_root == REPO else f" code={code_root}")
        + (f" ports={','.join(map(str, ports))}" if ports else ""))
    for fault in plan:
        log(f"  {fault.describe()}")
    root = root or Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    history = History()
    topics = topics_of(with_txn)
    cluster = ChaosCluster(root, brokers, {"unclean.leader.election.enable": str(expect_loss).lower(),
                                           "log.cleaner.backoff.ms": "1000",
                                           **(SHARE_BROKER_CONFIG if with_share else {})}, code_root,
                           list(ports or []))
    verdict = "error"
    report = Report()
    heal_error: str | None = None
    share: ShareWorkload | None = None
    try:
        cluster.start()
        create_topics(cluster.admin(), partitions, expect_loss, with_txn)
        wait_replicated(cluster, topics, "topics to be replicated")
        history = History()
        workload = Workload(history, cluster.bootstrap, partitions, seed, with_txn=with_txn, txn_version=txn_version)
        workload.start(time.monotonic() + duration + FAULTS_END_TIMEOUT + HEALTHY_TIMEOUT + 60)
        share = ShareWorkload(cluster, history, seed) if with_share else None
        if share is not None:
            share.start()
        nemesis = Nemesis(cluster, history, seed)
        try:
            nemesis.start(plan)
            time.sleep(max(0.0, duration - history.now()))
            holding = nemesis.join(FAULTS_END_TIMEOUT)
            history.add("heal", still_holding=holding)
            cluster.heal()
            try:
                wait_replicated(cluster, topics, "every partition's full ISR", history)
                history.add("healthy")
                time.sleep(2.0)  # the consumers read the tail
            except TimeoutError as exc:
                heal_error = str(exc)
                history.add("heal-failed", error=heal_error)
        finally:
            workload.stop()
            if share is not None:
                share.finish()
        drain(history, cluster.bootstrap, topics, partitions, 60.0 if heal_error is None else 30.0)
        if with_txn:
            drain(history, cluster.bootstrap, [TXN_TOPIC, CTP_TOPIC], partitions, 60.0, event="read-uncommitted")
        uneven = replicas.wait_level(root, LEVEL_TIMEOUT) if heal_error is None else None
        cluster.stop()
        report = check(history.snapshot(), LogProvenance.of_round(root).stamp, COMPACTED)
        for finding in replicas.compare(root, COMPACTED, uneven):
            report.add("replica_divergent", finding)
        if share is not None:
            share.record_broker_state(root)
            share.check(history.snapshot(), report)
        verdict = _verdict(report, heal_error, expect_loss)
    except Exception as exc:  # noqa: BLE001 - a round that cannot finish is a verdict too
        verdict = f"error: {type(exc).__name__}: {exc}"
        history.add("error", error=verdict)
    finally:
        cluster.stop()
    by_kind, by_partition = longest_unavailability(history.snapshot())
    result = RoundResult(seed, plan, verdict, report, by_kind, by_partition, heal_error is None,
                         skipped=skipped_faults(history.snapshot()))
    history.dump(root / "history.jsonl")
    if (result.ok and not keep_all) or keep_dir is None:
        shutil.rmtree(root, ignore_errors=True)
    else:
        keep_dir.mkdir(parents=True, exist_ok=True)
        result.kept = keep_dir / root.name
        shutil.move(str(root), result.kept)
    _log_round(history.snapshot(), result, log)
    return result


def bounded_round(seed: int, duration: float, *, bound: float | None = None, keep_dir: Path | None = None,
                  log=print, **options: Any) -> RoundResult:
    """`run_round` in a process of its own (watchdog.py): a round that has not ended after `bound` seconds
    (ROUND_SLACK_S past its duration by default) is killed with its clients, brokers and ZooKeeper and
    reported as a harness hang, with its threads' stacks: no verdict on the brokers, and not clean.

    The process is forked from this one, so it would inherit this one's `random` state and its place in the
    test ports' cycle (tests/ports.py): every round of a run would draw the same sequence and listen on the same
    ports, where an earlier round's broker slow to die may still be. So the brokers' ports are drawn here, where
    the cycle moves on and the reservations stay held for the rounds after (tests/ports.py's KEPT), and the
    round's process seeds `random` with the round's seed: a round replayed at its seed draws what it drew."""
    bound = bound if bound is not None else duration + ROUND_SLACK_S
    root = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    stacks = root / "stacks.txt"
    plan = plan_of(seed, duration, **{k: v for k, v in options.items()
                                      if k in ("partitions", "expect_loss", "generator", "kinds", "with_share")})
    ports = [restartable_port() for _ in range(options.get("brokers", 3))]

    def seeded_round() -> RoundResult:
        random.seed(seed)
        return run_round(seed, duration, keep_dir=keep_dir, root=root, ports=ports, log=log, **options)

    try:
        outcome = run_bounded(seeded_round, bound, stacks)
    except RoundProcessError as exc:  # run_round gives its own errors as verdicts: this is the process's
        shutil.rmtree(root, ignore_errors=True)
        return RoundResult(seed, plan, f"error: {exc}", Report(), healed=False)
    if isinstance(outcome, Bounded):
        return outcome.value
    kept = None
    if keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
        kept = keep_dir / root.name
        shutil.move(str(root), kept)
    else:
        shutil.rmtree(root, ignore_errors=True)
    where = f"stacks in {kept / stacks.name}" if kept else "stacks below"
    verdict = f"{HARNESS_HANG} (no end after {outcome.bound:.0f} s, {len(outcome.killed)} processes killed; {where})"
    log(f"  verdict: {verdict}")
    log("  stacks of the round's threads when it was killed:\n" + _indent(outcome.stacks or "(none written)"))
    return RoundResult(seed, plan, verdict, Report(), healed=False, kept=kept)


def skipped_faults(events: list[dict[str, Any]]) -> list[str]:
    """Each fault the nemesis skipped (it found nothing to aim at), as "kind: why"."""
    return [f"{e['kind']}: {e['reason']}" for e in events if e["type"] == "fault-skipped"]


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def _verdict(report: Report, heal_error: str | None, expect_loss: bool) -> str:
    if expect_loss:
        return EXPECTED_LOSS if report.anomalies["lost"] else "no loss (loss was expected!)"
    parts = [f"heal failed ({_shorten(heal_error)})"] if heal_error else []
    if not report.clean:
        parts.append("anomalies: " + json.dumps(report.counts()))
    return "; ".join(parts) or "clean"


def _shorten(text: str, limit: int = 200) -> str:
    """A verdict's part; the whole text is in the history."""
    return text if len(text) <= limit else text[:limit] + "..."


def _log_round(events: list[dict[str, Any]], result: RoundResult, log) -> None:
    report = result.report
    for e in events:
        if e["type"] == "fault" and e["phase"] == "start":
            aim = e["target"] if e.get("partition") is None else f"{e['target']} of p{e['partition']}"
            log(f"  at {e['t']:5.1f}s {e['kind']}({aim}) hit brokers {e['brokers']}")
        elif e["type"] == "fault-step":
            detail = {k: v for k, v in e.items() if k not in ("t", "type", "id", "step")}
            log(f"  at {e['t']:5.1f}s   {e['step']} {json.dumps(detail)}")
        elif e["type"] == "fault" and e.get("lost_bytes"):
            log(f"  at {e['t']:5.1f}s {e['kind']} cut unsynced bytes: {e['lost_bytes']}")
        elif e["type"] == "revived":
            log(f"  at {e['t']:5.1f}s brokers {e['brokers']} had exited and were started again")
        elif e["type"] == "fault-error":
            log(f"  at {e['t']:5.1f}s {e['kind']} could not be applied: {e['error']}")
        elif e["type"] == "fault-skipped":
            log(f"  at {e['t']:5.1f}s FAULT SKIPPED {e['kind']}: {e['reason']}")
    log(f"  verdict: {result.outcome}  stats={report.stats}")
    if report.explained:
        log("  explained (a client's documented behaviour, not a broker anomaly): "
            + json.dumps({name: len(found) for name, found in report.explained.items()}))
        log("    " + json.dumps(report.summary()["explained"])[:1000])
    if not report.clean:
        log("  examples: " + json.dumps(report.summary()["examples"])[:2000])
    log(f"  longest unavailability (s) per fault kind: {result.unavailable}")
    log(f"  per partition: {result.unavailable_partitions}")
    if result.kept:
        log(f"  history kept: {result.kept}/history.jsonl")


def table(results: list[RoundResult]) -> str:
    lines = ["| seed | faults | outcome | acked | txns (aborted/unknown) | longest unavailability (s) |",
             "|---|---|---|---|---|---|"]
    for r in results:
        kinds = ", ".join(f"{f.kind}({f.aim})" for f in r.schedule)
        stats = r.report.stats
        txns = f"{stats.get('txns', 0)} ({stats.get('aborted_txns', 0)}/{stats.get('unknown_txns', 0)})"
        worst = max(r.unavailable.values(), default=0.0)
        lines.append(f"| {r.seed} | {kinds} | {r.outcome} | {stats.get('acked', '')} | {txns} | {worst} |")
    by_kind: dict[str, float] = {}
    by_partition: dict[str, float] = {}
    for r in results:
        for kind, gap in r.unavailable.items():
            by_kind[kind] = max(by_kind.get(kind, 0.0), gap)
        for name, gap in r.unavailable_partitions.items():
            by_partition[name] = max(by_partition.get(name, 0.0), gap)
    lines.append("")
    lines.append("Longest unavailability per fault kind: " + ", ".join(
        f"{kind} {gap} s" for kind, gap in sorted(by_kind.items(), key=lambda kv: -kv[1])))
    lines.append("Longest unavailability per partition: " + ", ".join(
        f"{name} {gap} s" for name, gap in sorted(by_partition.items())))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults per round")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="first round's seed")
    parser.add_argument("--brokers", type=int, default=3, choices=(3, 5))
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--schedule", choices=faults.GENERATORS, default="overlapping",
                        help="sequential: one fault at a time; overlapping: faults while others hold, composite "
                             "ones among them; aimed: composite faults only")
    parser.add_argument("--kinds", help="comma-separated fault kinds to draw from (faults.py)")
    parser.add_argument("--txn", action="store_true", help="add the transactional workloads")
    parser.add_argument("--txn-version", type=int, choices=(1, 2), default=1,
                        help="their producers: 1 librdkafka (transactions V1), 2 the Java 4.2 client (V2, txn_v2.py)")
    parser.add_argument("--share", action="store_true", help="add the share-group workload (share_workload.py)")
    parser.add_argument("--no-expected-loss", action="store_true",
                        help="skip the final unclean-election + power-loss round (where loss must be detected)")
    parser.add_argument("--keep-dir", type=Path, default=Path("chaos-runs"))
    parser.add_argument("--keep-all", action="store_true", help="keep clean rounds' histories and logs too")
    parser.add_argument("--check", type=Path, help="only re-check a kept history.jsonl")
    parser.add_argument("--round-timeout", type=float,
                        help=f"seconds before a round that has not ended is killed and reported as a harness hang "
                             f"(default: its duration + {ROUND_SLACK_S:.0f})")
    args = parser.parse_args(argv)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # ZooKeeper start-up polling is noisy
    # SIGTERM unwinds like Ctrl-C, so the round's `finally` kills its brokers (paused ones included).
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(128 + signal.SIGTERM))
    if args.check:
        events = read_jsonl(args.check)
        if not any(e["type"] == "share-state-read" for e in events):  # a history kept before they were recorded
            events += state_reads(args.check.parent, events)
        if not any(e["type"] == "share-archived" for e in events):
            events += archived(args.check.parent, SHARE_GROUP)
        if not any(e["type"] == "share-passed" for e in events):
            events += passed(args.check.parent, SHARE_GROUP)
        report = check(events, LogProvenance.of_round(args.check.parent).stamp, COMPACTED)
        for start in (e for e in events if e["type"] == "share-start"):  # a round with the share workload
            check_share(events, start["delivery_count_limit"], start["durable"], report)
        for finding in replicas.compare(args.check.parent, COMPACTED):
            report.add("replica_divergent", finding)
        print(json.dumps(report.summary(), indent=1))
        return 0 if report.clean else 1
    kinds = args.kinds.split(",") if args.kinds else None
    results = [bounded_round(args.seed + i, args.duration, bound=args.round_timeout, brokers=args.brokers,
                             partitions=args.partitions, with_txn=args.txn, txn_version=args.txn_version,
                             with_share=args.share, generator=args.schedule, kinds=kinds,
                             keep_dir=args.keep_dir, keep_all=args.keep_all)
               for i in range(args.rounds)]
    if not args.no_expected_loss:
        results.append(bounded_round(args.seed + args.rounds, 20.0, bound=args.round_timeout, brokers=3,
                                     partitions=args.partitions, expect_loss=True, keep_dir=args.keep_dir))
    print(table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
