"""W15, share groups (KIP-932): records/s delivered and the broker's CPU per record when 1, 4 and 16 share
consumers (confluent-kafka's ShareConsumer, librdkafka's preview) read one partition, beside one classic consumer
in a group reading the same records. Tansu has no share groups: its share cells are n/a, its classic cell is
measured. The client load is `benchmarks/share_load.py`.
"""

from __future__ import annotations

import sys

from benchmarks.report import Metric
from benchmarks.workloads import Bench, LoadError, run_load, running

SHARE_LOAD = "benchmarks.share_load"
NO_SHARE_GROUPS = "Tansu has no share groups"
CLASSIC = "1 classic consumer"


def _label(consumers: int) -> str:
    return f"{consumers} share consumer{'s' if consumers > 1 else ''}"


def _metrics(label: str) -> dict[Metric, str]:
    return {Metric("W15 share groups", f"{label}: delivered", "records/s", True): "records_per_s",
            Metric("W15 share groups", f"{label}: broker CPU per record", "µs", False): "cpu_us",
            Metric("W15 share groups", f"{label}: records delivered again", "records", False): "redelivered"}


def w15(bench: Bench, side: str) -> None:
    args = bench.args
    counts = [int(n) for n in args.w15_consumers.split(",")]
    with running(bench.new(side), args.timeout) as broker:
        common = {"bootstrap": broker.bootstrap, "topic": "w15", "messages": args.w15_messages, "pid": broker.pid}
        try:
            run_load("fill", {**common, "batch": args.w15_batch}, args.timeout, module=SHARE_LOAD)
        except LoadError as exc:
            for label in [CLASSIC, *map(_label, counts)]:
                for metric in _metrics(label):
                    bench.report.na(metric, side, f"fill: {exc}")
            return
        for rep in range(args.repetitions):
            print(f"W15 classic rep {rep + 1}", file=sys.stderr)
            bench.measure(side, _metrics(CLASSIC), "classic", SHARE_LOAD, **common, group=f"classic-{rep}")
            for count in counts:
                if side == "tansu":
                    for metric in _metrics(_label(count)):
                        bench.report.na(metric, side, NO_SHARE_GROUPS)
                    continue
                print(f"W15 {_label(count)} rep {rep + 1}", file=sys.stderr)
                bench.measure(side, _metrics(_label(count)), "share", SHARE_LOAD, **common,
                              group=f"share-{count}-{rep}", consumers=count)
