"""W13 and W14, many partitions: what a broker costs per partition, at rest and across restarts.

W13 is one broker with `--w13-partitions` (10,000); W14 the ZooKeeper cluster of three brokers with
`--w14-partitions` (1,000) replicated 3 ways. pybroker only: the peer keeps its partitions in memory here,
so descriptors, restarts and recovery are not its costs to compare. The client load is
`benchmarks/scale_load.py`; the broker's RSS, open files and CPU are read from /proc by this harness.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.brokers import PyBroker
from benchmarks.cluster import BROKERS, running_brokers
from benchmarks.load import cpu_seconds
from benchmarks.report import Metric
from benchmarks.workloads import Bench, LoadError, run_load

SCALE_LOAD = "benchmarks.scale_load"


def _topics(partitions: int, per_topic: int, prefix: str) -> dict[str, Any]:
    return {"prefix": prefix, "topics": max(1, partitions // per_topic), "per_topic": per_topic}


def _idle_cpu_percent(pids: list[int], seconds: float) -> list[float]:
    """Each process's CPU over `seconds` of doing nothing asked of it, in percent of one core."""
    before = [cpu_seconds(pid) for pid in pids]
    time.sleep(seconds)
    return [100 * (cpu_seconds(pid) - start) / seconds for pid, start in zip(pids, before, strict=True)]


class _Run:
    """One repetition's measurements: a failed step records n/a for its own metrics and for every later one
    (they depend on it), with its message."""

    def __init__(self, bench: Bench, metrics: dict[str, Metric]) -> None:
        self.bench, self.metrics, self.failed = bench, metrics, ""
        self.kept: set[str] = set()

    def load(self, op: str, params: dict[str, Any]) -> dict[str, float] | None:
        if self.failed:
            return None
        try:
            return run_load(op, params, self.bench.args.timeout, module=SCALE_LOAD)
        except LoadError as exc:
            self.failed = f"{op}: {exc}"
            print(f"  pybroker: n/a ({self.failed})", file=sys.stderr)
            return None

    def keep(self, values: dict[str, float]) -> None:
        if not self.failed:
            self.bench.keep("pybroker", {self.metrics[key]: key for key in values}, values)
            self.kept |= set(values)

    def finish(self) -> None:
        """n/a for whatever was not measured because a step failed."""
        if self.failed:
            for key, metric in self.metrics.items():
                if key not in self.kept:
                    self.bench.report.na(metric, "pybroker", self.failed)


def _pybroker_only(bench: Bench, metrics: dict[str, Metric]) -> None:
    for metric in metrics.values():
        bench.report.na(metric, "tansu", "pybroker only: Tansu keeps partitions in memory here")


def w13(bench: Bench, side: str) -> None:
    """W13 one broker, `--w13-partitions`: create, at rest, produce and fetch, clean and unclean restarts."""
    args = bench.args
    topics = _topics(args.w13_partitions, args.w13_per_topic, "w13")
    count = topics["topics"] * topics["per_topic"]
    what = f"{count:,} partitions ({topics['topics']:,} topics × {topics['per_topic']})"
    m: Callable[[str, str, bool], Metric] = lambda name, unit, higher: Metric("W13 partitions", f"{what}: {name}",
                                                                               unit, higher)
    metrics = {
        "create_s": m(f"create, {args.w13_batch} topics per CreateTopics, until all led", "s", False),
        "rss_created": m("broker RSS after create", "MiB", False),
        "files_created": m("broker open files after create", "files", False),
        "files_per_partition": m("open files per partition at rest", "files", False),
        "idle_cpu": m(f"idle broker CPU over {args.w13_idle_seconds:.0f} s", "% of a core", False),
        "produce": m(f"produce {args.w13_messages} × 100 B to every partition", "msgs/s", True),
        "fetch": m("fetch them all back (one consumer, every partition assigned)", "msgs/s", True),
        "rss_used": m("broker RSS after produce and fetch", "MiB", False),
        "shutdown_s": m("clean shutdown (SIGTERM to exit)", "s", False),
        "clean_led_s": m("clean restart: spawn to every partition led", "s", False),
        "clean_produced_s": m("clean restart: spawn to a produce acknowledged on the first and last partition",
                              "s", False),
        "rss_restarted": m("broker RSS after the clean restart", "MiB", False),
        "files_restarted": m("broker open files after the clean restart", "files", False),
        "unclean_led_s": m("unclean restart (SIGKILL): spawn to every partition led", "s", False),
        "unclean_produced_s": m("unclean restart (SIGKILL): spawn to a produce acknowledged on the first and last "
                                "partition", "s", False),
    }
    if side == "tansu":
        _pybroker_only(bench, metrics)
        return
    for rep in range(args.repetitions):
        print(f"W13 rep {rep + 1}", file=sys.stderr)
        workdir = Path(tempfile.mkdtemp(prefix="w13-", dir=bench.scratch))
        broker = PyBroker(workdir)
        broker.open_files = args.w13_open_files
        run = _Run(bench, metrics)
        try:
            broker.start(args.timeout)
            files_before = broker.open_files_now()
            created = run.load("create", {"bootstrap": broker.bootstrap, **topics, "replicas": 1,
                                          "batch": args.w13_batch})
            if created is not None:
                files = broker.open_files_now()
                run.keep({"create_s": created["create_s"], "rss_created": broker.rss_mb(), "files_created": files,
                          "files_per_partition": (files - files_before) / count})
                run.keep({"idle_cpu": _idle_cpu_percent([broker.pid], args.w13_idle_seconds)[0]})
            used = run.load("produce_fetch", {"bootstrap": broker.bootstrap, **topics, "messages": args.w13_messages})
            if used is not None:
                run.keep({"produce": used["produce"], "fetch": used["fetch"], "rss_used": broker.rss_mb()})
            if not run.failed:
                stopping = time.perf_counter()
                if not broker.stop(args.timeout):
                    run.failed = f"no clean shutdown within {args.timeout:.0f} s"
                run.keep({"shutdown_s": time.perf_counter() - stopping})
            for kind in ("clean", "unclean"):
                if run.failed:
                    break
                if kind == "unclean":
                    broker.kill()
                since = time.time()
                broker.start(args.timeout)
                served = run.load("until_serving", {"bootstrap": broker.bootstrap, **topics, "since": since})
                if served is not None:
                    run.keep({f"{kind}_led_s": served["led_s"], f"{kind}_produced_s": served["produced_s"]})
                    if kind == "clean":
                        run.keep({"rss_restarted": broker.rss_mb(), "files_restarted": broker.open_files_now()})
        except RuntimeError as exc:  # the broker did not start
            run.failed = str(exc)
        finally:
            run.finish()
            broker.stop(args.timeout)
            shutil.rmtree(workdir, ignore_errors=True)
    limit = f"RLIMIT_NOFILE {args.w13_open_files}" if args.w13_open_files else "the harness's own RLIMIT_NOFILE"
    bench.report.notes.append(f"W13: the broker started with {limit}; default config (log.flush.interval.ms "
                              "unset, so after SIGKILL every partition is recovered from its last checkpoint)")


def w14(bench: Bench, side: str) -> None:
    """W14 the ZooKeeper cluster, `--w14-partitions` with replication factor 3: create, per-broker cost at
    rest, produce and fetch, a full UpdateMetadata's size, and the controller killed: failover and return."""
    args = bench.args
    topics = _topics(args.w14_partitions, args.w14_per_topic, "w14")
    count = topics["topics"] * topics["per_topic"]
    what = f"{count:,} partitions RF 3 ({topics['topics']:,} topics × {topics['per_topic']}), {BROKERS} brokers"
    m: Callable[[str, str, bool], Metric] = lambda name, unit, higher: Metric("W14 replicated partitions",
                                                                               f"{what}: {name}", unit, higher)
    metrics = {
        "create_s": m("create, until every partition is led with its ISR full", "s", False),
        "rss": m("RSS of the largest broker after create", "MiB", False),
        "files": m("open files of the busiest broker after create", "files", False),
        "idle_cpu": m(f"idle CPU of the busiest broker over {args.w13_idle_seconds:.0f} s", "% of a core", False),
        "produce": m(f"produce {args.w13_messages} × 100 B to every partition, acks=all", "msgs/s", True),
        "fetch": m("fetch them all back", "msgs/s", True),
        "update_metadata_bytes": m("full UpdateMetadata (what a new controller sends every broker)", "bytes",
                                   False),
        "controller_s": m("controller SIGKILLed: to a new controller", "s", False),
        "led_s": m("controller SIGKILLed: to every partition led by a live broker", "s", False),
        "rejoin_s": m("the killed broker restarted: spawn to every partition's ISR full again", "s", False),
    }
    if side == "tansu":
        _pybroker_only(bench, metrics)
        return
    for rep in range(args.repetitions):
        print(f"W14 rep {rep + 1}", file=sys.stderr)
        run = _Run(bench, metrics)
        try:
            with running_brokers(bench.scratch, args.timeout, args.w13_open_files) as brokers:
                bootstrap = ",".join(b.bootstrap for b in brokers)
                created = run.load("create", {"bootstrap": bootstrap, **topics, "replicas": 3, "batch": 100})
                if created is not None:
                    run.keep({"create_s": created["create_s"], "rss": max(b.rss_mb() for b in brokers),
                              "files": max(b.open_files_now() for b in brokers)})
                    run.keep({"idle_cpu": max(_idle_cpu_percent([b.pid for b in brokers], args.w13_idle_seconds))})
                used = run.load("produce_fetch", {"bootstrap": bootstrap, **topics, "messages": args.w13_messages,
                                                  "acks": "all"})
                if used is not None:
                    run.keep({"produce": used["produce"], "fetch": used["fetch"]})
                size = run.load("update_metadata_bytes", {"bootstrap": bootstrap, **topics})
                if size is not None:
                    run.keep({"update_metadata_bytes": size["bytes"]})
                _failover(run, brokers, topics)
        except RuntimeError as exc:  # ZooKeeper or a broker did not start
            run.failed = run.failed or str(exc)
        finally:
            run.finish()
    bench.report.notes.append("W14: the controller's death is noticed when ZooKeeper expires its session "
                              "(zookeeper.session.timeout.ms), which the failover times include")


def _failover(run: _Run, brokers: list[PyBroker], topics: dict[str, Any]) -> None:
    """SIGKILL the controller; time the survivors' failover, then the killed broker's way back into every ISR."""
    if run.failed:
        return
    found = run.load("controller", {"bootstrap": ",".join(b.bootstrap for b in brokers)})
    if found is None:
        return
    dead = brokers[int(found["controller"])]
    survivors = [b for b in brokers if b is not dead]
    dead.kill()
    since = time.time()
    moved = run.load("failover", {"bootstrap": ",".join(b.bootstrap for b in survivors), **topics, "since": since,
                                  "live": [brokers.index(b) for b in survivors]})
    if moved is None:
        return
    run.keep({"controller_s": moved["controller_s"], "led_s": moved["led_s"]})
    since = time.time()
    dead.start(run.bench.args.timeout)
    back = run.load("until_serving", {"bootstrap": ",".join(b.bootstrap for b in brokers), **topics, "since": since,
                                      "isr": 3})
    if back is not None:
        run.keep({"rejoin_s": back["led_s"]})
