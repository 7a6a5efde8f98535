"""The allocator's part in big produce batches: `python -m benchmarks.alloc`, not in `make bench`.

Starts one pybroker per variant (`--variant NAME=TREE[:VAR=VALUE,...]`: the tree it runs from, whatever its
`setup.py build_ext --inplace` left, and environment variables for the broker alone, e.g. glibc's
``MALLOC_MMAP_THRESHOLD_``), the variants taking turns, `--turns` times. Each broker: its RSS once it answers
and has been idle for a second, then `--rounds` rounds of W1's produce (`--messages` of 100 bytes, W1's
batching, uncompressed and lz4, 1 and 8 partitions, a new topic each time) with its CPU (utime, stime) per
message and its minor page faults per MiB produced in each, and its RSS after each round (it must level off),
then W12's one-message Produce and empty Fetch (`--w12-seconds`, 8 clients) for the cost of a small request.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import load
from benchmarks.brokers import PyBroker

CONFIGS = (("none", 1), ("none", 8), ("lz4", 1), ("lz4", 8))
#: `--big`: W1 uncompressed on 1 partition again with batches of 4 MiB, past the 1 MiB up to which a batch is
#: checked on the event loop (replication/append_records.py), so on an I/O thread
BIG_BATCH = 4 << 20
BIG_CONFIG = {"batch.size": BIG_BATCH, "message.max.bytes": BIG_BATCH + 4096}
IDLE_SECONDS = 1.0


def proc_stat(pid: int) -> tuple[int, float, float]:
    """Minor page faults, utime and stime (seconds) of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[7]), int(fields[11]) / tick, int(fields[12]) / tick


def configs(big: bool) -> list[tuple[str, int, bool]]:
    return [(codec, partitions, False) for codec, partitions in CONFIGS] + ([("none", 1, True)] if big else [])


def label(codec: str, partitions: int, big: bool) -> str:
    return f"{codec}/{partitions}{' 4MiB' if big else ''}"


def parse_variant(text: str) -> tuple[str, Path, dict[str, str]]:
    name, _, rest = text.partition("=")
    tree, _, env = rest.partition(":")
    pairs = dict(item.split("=", 1) for item in env.split(",") if item)
    return name, Path(tree).resolve(), pairs


def run_variant(name: str, tree: Path, env: dict[str, str], args: argparse.Namespace, turn: int) -> dict[str, Any]:
    """One broker of variant `name` through idle, `rounds` rounds of W1's produce and W12."""
    with tempfile.TemporaryDirectory(prefix=f"alloc-{name}-") as workdir:
        broker = PyBroker(Path(workdir), {"message.max.bytes": str(2 * BIG_BATCH)})
        broker.cwd = tree
        broker.env = {**env, "PYTHONPATH": str(tree)}
        broker.start(args.timeout)
        try:
            time.sleep(IDLE_SECONDS)
            result: dict[str, Any] = {"variant": name, "turn": turn, "idle_rss_mib": broker.rss_mb(), "rounds": []}
            for round_index in range(args.rounds):
                cells = {}
                for codec, partitions, big in configs(args.big):
                    topic = f"w1-{codec}-{partitions}{'-big' if big else ''}-{round_index}"
                    load.create_topic(broker.bootstrap, topic, partitions, args.timeout)
                    client = load.producer(broker.bootstrap, **{**load.BATCHING, **(BIG_CONFIG if big else {})},
                                           **{"compression.type": codec})
                    faults, user, system = proc_stat(broker.pid)
                    seconds = load.produce_all(client, topic, args.messages, partitions, load.PAYLOAD, args.timeout)
                    faults_end, user_end, system_end = proc_stat(broker.pid)
                    del client  # its connection closes before the next one's load
                    per_message = 1e6 / args.messages
                    cells[label(codec, partitions, big)] = {
                        "msgs_s": args.messages / seconds,
                        "cpu_us": (user_end - user + system_end - system) * per_message,
                        "sys_us": (system_end - system) * per_message,
                        "faults_per_mib": (faults_end - faults) / (args.messages * len(load.PAYLOAD) / load.MIB_BYTES)}
                result["rounds"].append({"cells": cells, "rss_mib": broker.rss_mb()})
                print(f"  {name} turn {turn} round {round_index}: rss {broker.rss_mb():.1f} MiB " + "  ".join(
                    f"{key} {cell['cpu_us']:.2f} us/msg {cell['faults_per_mib']:.0f} flt/MiB"
                    for key, cell in cells.items()), file=sys.stderr, flush=True)
            if args.w12_seconds > 0:
                result["w12"] = {kind: load.request_cost({
                    "bootstrap": broker.bootstrap, "pid": broker.pid, "topic": f"w12-{kind}", "kind": kind,
                    "clients": 8, "seconds": args.w12_seconds, "timeout": args.timeout})
                    for kind in ("produce", "fetch")}
            result["final_rss_mib"] = broker.rss_mb()
            return result
        finally:
            broker.stop(args.timeout)


def span(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def summary(results: list[dict[str, Any]]) -> None:
    """Per variant: medians and ranges over every turn and round, and over the first rounds alone (a fresh
    broker, as the harness's W1 meets it)."""
    big = any(label("none", 1, True) in r["rounds"][0]["cells"] for r in results)
    for name in dict.fromkeys(r["variant"] for r in results):
        mine = [r for r in results if r["variant"] == name]
        print(f"{name}: idle RSS {span([r['idle_rss_mib'] for r in mine], 1)} MiB")
        for key in (label(*config) for config in configs(big)):
            cells = [rnd["cells"][key] for r in mine for rnd in r["rounds"]]
            first = [r["rounds"][0]["cells"][key]["cpu_us"] for r in mine]
            faults = [c["faults_per_mib"] for c in cells]
            print(f"  W1 {key}: cpu {span([c['cpu_us'] for c in cells])} us/msg, first rounds {span(first)}"
                  f" (sys {span([c['sys_us'] for c in cells])}), faults/MiB {span(faults, 0)},"
                  f" msgs/s {span([c['msgs_s'] for c in cells], 0)}")
        for r in mine:
            rounds = ", ".join(f"{rnd['rss_mib']:.1f}" for rnd in r["rounds"])
            print(f"  turn {r['turn']} RSS after each round: {rounds}; at the end {r['final_rss_mib']:.1f} MiB")
        for kind in ("produce", "fetch"):
            w12 = [r["w12"][kind] for r in mine if "w12" in r]
            if w12:
                print(f"  W12 {kind}: cpu {span([w['cpu_us'] for w in w12], 1)} us/request at "
                      f"{span([w['requests_per_s'] for w in w12], 0)} requests/s")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.alloc", description=__doc__)
    parser.add_argument("--variant", action="append", required=True, help="NAME=TREE[:VAR=VALUE,...]")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--w12-seconds", type=float, default=5.0)
    parser.add_argument("--big", action="store_true", help="also 4 MiB batches (checked off the event loop)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", help="write every sample as JSON here")
    args = parser.parse_args()
    variants = [parse_variant(text) for text in args.variant]
    results = [run_variant(name, tree, env, args, turn) for turn in range(args.turns) for name, tree, env in variants]
    summary(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
