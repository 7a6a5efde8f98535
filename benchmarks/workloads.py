"""The harness side of each workload: which broker runs, which client load drives it, what is recorded."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.brokers import REPO, BrokerProcess, PyBroker, Tansu, free_port
from benchmarks.cluster import BROKERS, running_cluster
from benchmarks.report import LIMIT, Metric, Report
from benchmarks.load import empty_fetch_exchange
from benchmarks.sink import running_answerer, running_sink
from pybroker.security.dev_certs import make_dev_certs

MIB = 1 << 20
W1_VARIANTS = (("none", 1), ("none", 8), ("lz4", 1), ("lz4", 8))
W9_LISTENERS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")
W9_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
W9_USER, W9_PASSWORD = "bench", "bench-secret"
W9_THROUGHPUT_MECHANISM = "SCRAM-SHA-512"  # for the SASL_* protocols in --w9-protocols


class LoadError(RuntimeError):
    """A client load failed or timed out; its message becomes the n/a reason."""


def run_load(op: str, params: dict[str, Any], timeout: float, module: str = "benchmarks.load") -> dict[str, float]:
    """Run one operation of `module` (`benchmarks.load`) in its own process group, killed on error or after
    2x`timeout`+30 s."""
    command = [sys.executable, "-m", module, op, json.dumps({**params, "timeout": timeout})]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=2 * timeout + 30)
    except subprocess.TimeoutExpired as exc:
        raise LoadError(f"{op} timed out") from exc
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if process.returncode != 0:
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("%")]
        raise LoadError(lines[-1][-200:] if lines else f"{op} exited with code {process.returncode}")
    return dict(json.loads(out.strip().splitlines()[-1]))


@dataclass
class Bench:
    """What every workload needs: the options, a scratch directory, the peer binary and the report."""

    args: argparse.Namespace
    scratch: Path
    tansu: Path | None
    report: Report

    def new(self, side: str, overrides: dict[str, str] | None = None) -> BrokerProcess:
        workdir = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=self.scratch))
        if side == "pybroker":
            return PyBroker(workdir, overrides)
        assert self.tansu is not None, "the Tansu side runs only with a Tansu binary"
        return Tansu(workdir, self.tansu)

    def measure(self, side: str, metrics: dict[Metric, str], op: str, module: str = "benchmarks.load",
                **params: Any) -> bool:
        """Run one load of `module` and keep `metrics` (metric → result key) from it, or n/a for all of them if it
        fails."""
        try:
            result = run_load(op, params, self.args.timeout, module)
        except LoadError as exc:
            for metric in metrics:
                self.report.na(metric, side, str(exc))
            print(f"  {side}: n/a ({exc})", file=sys.stderr)
            return False
        self.keep(side, metrics, result)
        return True

    def keep(self, side: str, metrics: dict[Metric, str], result: dict[str, float]) -> None:
        for metric, key in metrics.items():
            self.report.add(metric, side, result[key])
        print(f"  {side}: " + ", ".join(f"{m.name} {result[k]:,.3f} {m.unit}" for m, k in metrics.items()),
              file=sys.stderr)


@contextmanager
def running(broker: BrokerProcess, timeout: float) -> Iterator[BrokerProcess]:
    """A started broker, stopped cleanly and its directory removed afterwards."""
    try:
        broker.start(timeout)
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(broker.workdir, ignore_errors=True)


def w1_w2(bench: Bench, side: str) -> None:
    """W1 produce throughput and W2 consume-from-the-beginning of the same data, per codec and partition count."""
    wanted = set(bench.args.only)
    with running(bench.new(side), bench.args.timeout) as broker:
        run_load("warmup", {"bootstrap": broker.bootstrap}, bench.args.timeout)
        for codec, partitions in W1_VARIANTS:
            label = f"{codec}, {partitions} partition{'s' if partitions > 1 else ''}"
            metrics = {metric: key for metric, key in
                       ((Metric("W1 produce", label, "msgs/s", True), "produce"),
                        (Metric("W1 produce", label + ": broker CPU per message", "µs", False), "produce_cpu_us"),
                        (Metric("W2 consume", label + ": steady (first batch to last)", "msgs/s", True), "consume"),
                        (Metric("W2 consume", label + ": total (assign() to last)", "msgs/s", True),
                         "consume_total"),
                        (Metric("W2 consume", label + ": assign() to first message", "s", False),
                         "consume_first_s"),
                        (Metric("W2 consume", label + ": broker CPU per message", "µs", False), "consume_cpu_us"),
                        (Metric("W2 consume", label + ": received per Fetch request", "KiB", True), "fetch_kib"),
                        (Metric("W2 consume", label + ": Fetch requests", "requests/s", False), "fetches_per_s"),
                        (Metric("W2 consume", label + ", responses ≤ 1 MiB: steady", "msgs/s", True),
                         "consume_bounded"),
                        (Metric("W2 consume", label + ", responses ≤ 1 MiB: total", "msgs/s", True),
                         "consume_bounded_total"),
                        (Metric("W2 consume", label + ", responses ≤ 1 MiB: received per Fetch request", "KiB",
                                True), "fetch_kib_bounded"),
                        (Metric("W2 consume", label + ", raw Fetch ≤ 1 MiB, no client decoding: served", "MiB/s",
                                True), "raw_fetch_mib_s"),
                        (Metric("W2 consume", label + ", raw Fetch ≤ 1 MiB, no client decoding: round trip p50",
                                "ms", False), "raw_fetch_ms"))
                       if metric.code in wanted}
            for rep in range(bench.args.repetitions):
                print(f"W1/W2 {label} rep {rep + 1}", file=sys.stderr)
                bench.measure(side, metrics, "produce_consume", bootstrap=broker.bootstrap,
                              topic=f"w1-{codec}-{partitions}-{rep}", codec=codec, partitions=partitions,
                              messages=bench.args.messages, pid=broker.pid, bounded="W2" in wanted)


def w3(bench: Bench, side: str) -> None:
    """W3 request rate: concurrent producers, linger.ms=0, acks=all."""
    label = f"{bench.args.w3_producers} producers, window {bench.args.w3_window}"
    metrics = {Metric("W3 request rate", label, "requests/s", True): "requests_per_s",
               Metric("W3 request rate", label + ", p99", "ms", False): "p99_ms"}
    with running(bench.new(side), bench.args.timeout) as broker:
        for rep in range(bench.args.repetitions):
            print(f"W3 rep {rep + 1}", file=sys.stderr)
            bench.measure(side, metrics, "request_rate", bootstrap=broker.bootstrap, topic=f"w3-{rep}",
                          producers=bench.args.w3_producers, seconds=bench.args.w3_seconds,
                          window=bench.args.w3_window)


def w12(bench: Bench, side: str) -> None:
    """W12 the broker CPU one small request costs: one-message Produce requests, then empty Fetches."""
    clients = bench.args.w12_clients
    for kind, what in (("produce", "Produce, 1 message (linger.ms=0, acks=all)"),
                       ("fetch", "empty Fetch (fetch.wait.max.ms=0)")):
        label = f"{what}, {clients} clients"
        metrics = {Metric("W12 request cost", label + ": broker CPU per request", "µs", False): "cpu_us",
                   Metric("W12 request cost", label + ": of which in the kernel (stime)", "µs", False):
                       "kernel_cpu_us",
                   Metric("W12 request cost", label + ": requests", "requests/s", True): "requests_per_s",
                   Metric("W12 request cost", label + ": broker CPU share", "cores", False): "broker_cpu_share"}
        with running(bench.new(side), bench.args.timeout) as broker:
            for rep in range(bench.args.repetitions):
                print(f"W12 {kind} rep {rep + 1}", file=sys.stderr)
                bench.measure(side, metrics, "request_cost", bootstrap=broker.bootstrap, pid=broker.pid,
                              topic=f"w12-{kind}-{rep}", kind=kind, clients=clients, seconds=bench.args.w12_seconds)


def w4(bench: Bench, side: str) -> None:
    """W4 single-message acks=all round trip."""
    label = f"acks=all round trip, {bench.args.w4_sends} sends"
    metrics = {Metric("W4 latency", label + ", p50", "ms", False): "p50_ms",
               Metric("W4 latency", label + ", p99", "ms", False): "p99_ms"}
    with running(bench.new(side), bench.args.timeout) as broker:
        for rep in range(bench.args.repetitions):
            print(f"W4 rep {rep + 1}", file=sys.stderr)
            bench.measure(side, metrics, "roundtrip", bootstrap=broker.bootstrap, topic=f"w4-{rep}",
                          sends=bench.args.w4_sends)


def w5(bench: Bench, side: str) -> None:
    """W5 many partitions, on a fresh broker per repetition so that RSS holds one such topic."""
    n = bench.args.w5_partitions
    metrics = {Metric("W5 partitions", f"{n} partitions: Metadata p50", "ms", False): "metadata_ms",
               Metric("W5 partitions", f"{n} partitions: round-robin produce", "msgs/s", True): "produce"}
    rss = Metric("W5 partitions", f"{n} partitions: broker RSS after produce", "MiB", False)
    for rep in range(bench.args.repetitions):
        print(f"W5 rep {rep + 1}", file=sys.stderr)
        with running(bench.new(side), bench.args.timeout) as broker:
            if bench.measure(side, metrics, "many_partitions", bootstrap=broker.bootstrap, topic="w5", partitions=n,
                             messages=bench.args.w5_messages, metadata_requests=bench.args.w5_metadata_requests):
                bench.report.add(rss, side, broker.rss_mb())


def w6(bench: Bench, side: str) -> None:
    """W6 a three-broker cluster: replication factor 3, min.insync.replicas=2, acks=all."""
    label = f"{BROKERS} brokers, RF 3, min.insync.replicas=2, acks=all"
    metrics = {Metric("W6 replicated", f"{label}: produce", "msgs/s", True): "produce",
               Metric("W6 replicated", f"{label}: round trip p50", "ms", False): "p50_ms",
               Metric("W6 replicated", f"{label}: round trip p99", "ms", False): "p99_ms"}
    if side == "tansu":
        for metric in metrics:
            bench.report.na(metric, side, "no cluster here, see note")
        bench.report.notes.append("W6: Tansu cannot run a cluster here: its brokers share one storage engine "
                                  "(S3, PostgreSQL) instead of replicating, and this build's only engine is "
                                  "in-memory, private to each broker")
        return
    with running_cluster(bench.scratch, bench.args.timeout) as bootstrap:
        for rep in range(bench.args.repetitions):
            print(f"W6 rep {rep + 1}", file=sys.stderr)
            bench.measure(side, metrics, "replicated", bootstrap=bootstrap, topic=f"w6-{rep}",
                          messages=bench.args.w6_messages, sends=bench.args.w4_sends)


def w7(bench: Bench, side: str) -> None:
    """W7 start-up over a data directory of many segments, after SIGKILL and after SIGTERM."""
    size, segment = bench.args.w7_mb, bench.args.w7_segment_mb
    clean = Metric("W7 start-up", f"{size} MiB in {segment} MiB segments, after clean stop (SIGTERM)", "s", False)
    unclean = Metric("W7 start-up", f"{size} MiB in {segment} MiB segments, after unclean stop (SIGKILL)", "s",
                     False)
    if side == "tansu":
        for metric in (clean, unclean):
            bench.report.na(metric, side, f"{Tansu.storage} storage: nothing on disk")
        return
    for rep in range(bench.args.repetitions):
        print(f"W7 rep {rep + 1}", file=sys.stderr)
        broker = bench.new(side, {"log.segment.bytes": str(segment * MIB)})
        try:
            broker.start(bench.args.timeout)
            run_load("fill", {"bootstrap": broker.bootstrap, "topic": "w7", "partitions": 4, "bytes": size * MIB},
                     bench.args.timeout)
            broker.kill()
            segments = sum(1 for _ in Path(broker.workdir, "logs").glob("w7-*/*.log"))
            took = {"unclean": broker.start(bench.args.timeout)}
            broker.stop()
            took["clean"] = broker.start(bench.args.timeout)
            bench.keep(side, {unclean: "unclean", clean: "clean"}, took)
            if rep == 0:
                bench.report.notes.append(f"W7 data directory: {size} MiB in {segments} segment files, 4 partitions")
        finally:
            broker.stop()
            shutil.rmtree(broker.workdir, ignore_errors=True)


def w10(bench: Bench, side: str) -> None:
    """W10 start-up from nothing, as a test suite meets it: port open, first acknowledged produce, idle RSS."""
    metrics = {Metric("W10 start-up", "from nothing to the port accepting connections", "s", False): "port_open_s",
               Metric("W10 start-up", "from nothing to a first acks=all produce acknowledged (topic created)",
                      "s", False): "first_produce_s",
               Metric("W10 start-up", "RSS of the idle broker after that produce", "MiB", False): "rss_mb"}
    if side == "pybroker":
        # As pip installs it: byte-compiled. A checkout run with PYTHONDONTWRITEBYTECODE=1 (this project's
        # machines set it) would otherwise compile every module from source at each start, about 0.3 s.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "pybroker")], check=True,
                       stdout=subprocess.DEVNULL)
    for rep in range(bench.args.repetitions):
        print(f"W10 rep {rep + 1}", file=sys.stderr)
        bench.measure(side, metrics, "startup", broker=side, port=free_port(), scratch=str(bench.scratch),
                      tansu=str(bench.tansu))


def w11(bench: Bench, side: str) -> None:
    """W11 authorization cost, pybroker only: W1's produce (uncompressed, 1 partition) and W4's acks=all
    round trip on a broker without an authorizer and on one with Kafka's AclAuthorizer and --w11-acls
    ACLs, in the same run; their ratio is the cost of the checks on the produce path."""
    variants = {"no authorizer": {}, f"AclAuthorizer, {bench.args.w11_acls} ACLs": {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "allow.everyone.if.no.acl.found": "true"}}
    metrics = {name: {Metric("W11 authorization", f"{name}: produce", "msgs/s", True): "produce",
                      Metric("W11 authorization", f"{name}: acks=all round trip p50", "ms", False): "p50_ms",
                      Metric("W11 authorization", f"{name}: acks=all round trip p99", "ms", False): "p99_ms"}
               for name in variants}
    if side == "tansu":
        for group in metrics.values():
            for metric in group:
                bench.report.na(metric, side, "pybroker with and without its authorizer")
        return
    for name, overrides in variants.items():
        with running(bench.new(side, overrides), bench.args.timeout) as broker:
            if overrides:
                run_load("allow_acls", {"bootstrap": broker.bootstrap, "prefix": "w11-",
                                        "others": bench.args.w11_acls - 3}, bench.args.timeout)
            run_load("warmup", {"bootstrap": broker.bootstrap}, bench.args.timeout)
            for rep in range(bench.args.repetitions):
                print(f"W11 {name} rep {rep + 1}", file=sys.stderr)
                produce = {m: k for m, k in metrics[name].items() if k == "produce"}
                latency = {m: k for m, k in metrics[name].items() if k != "produce"}
                bench.measure(side, produce, "produce_consume", bootstrap=broker.bootstrap, topic=f"w11-p-{rep}",
                              codec="none", partitions=1, messages=bench.args.w11_messages)
                bench.measure(side, latency, "roundtrip", bootstrap=broker.bootstrap, topic=f"w11-r-{rep}",
                              sends=bench.args.w4_sends)


def w8(bench: Bench, side: str) -> None:
    """W8 noisy neighbour: a small produce's latency while one client reads a cold log and another commits."""
    size = bench.args.w8_mb
    label = f"acks=all produce while reading {size} MiB from a cold log start + committing in a loop"
    metrics = {Metric("W8 noisy neighbour", label + ", p50", "ms", False): "p50_ms",
               Metric("W8 noisy neighbour", label + ", p99", "ms", False): "p99_ms",
               Metric("W8 noisy neighbour", "the reader's fetch rate", "MiB/s", True): "fetch_mib_per_s",
               Metric("W8 noisy neighbour", "the committer's OffsetCommits", "commits/s", True): "commits_per_s"}
    for rep in range(bench.args.repetitions):
        print(f"W8 rep {rep + 1}", file=sys.stderr)
        with running(bench.new(side), bench.args.timeout) as broker:
            try:
                result = run_load("noisy_neighbour", {"bootstrap": broker.bootstrap, "bytes": size * MIB},
                                  bench.args.timeout)
            except LoadError as exc:
                for metric in metrics:
                    bench.report.na(metric, side, str(exc))
                print(f"  {side}: n/a ({exc})", file=sys.stderr)
                continue
            bench.keep(side, metrics, result)
            if rep == 0 and side == "pybroker":
                bench.report.notes.append(
                    "W8 page cache " + ("dropped before the read" if result["cache_dropped"] else
                                        "NOT dropped (not root): the log was read from memory"))


def machine_limit(bench: Bench, side: str) -> None:
    """Loopback TCP into a file with a minimal uvloop receiver, same payload volume as W1."""
    volume = bench.args.messages * 100
    label = f"loopback TCP → file, {volume / MIB:.0f} MiB"
    metrics = {Metric(LIMIT, label + " (100-byte message equivalents)", "msgs/s", True): "msgs_per_s",
               Metric(LIMIT, label, "MiB/s", True): "mib_per_s"}
    workdir = Path(tempfile.mkdtemp(prefix="sink-", dir=bench.scratch))
    try:
        for rep in range(bench.args.repetitions):
            print(f"LIMIT rep {rep + 1}", file=sys.stderr)
            with running_sink(workdir / f"sink-{rep}.bin") as port:
                bench.measure(side, metrics, "sink_send", port=port, bytes=volume)
            (workdir / f"sink-{rep}.bin").unlink()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def request_floor(bench: Bench, side: str) -> None:
    """W12's floor: a bare uvloop server answers each empty Fetch with canned bytes of its answer's size,
    for as many raw connections (one request in flight each) as W12 has clients."""
    frame, answer_size = empty_fetch_exchange()
    label = f"one empty Fetch answered with canned bytes by a bare uvloop server, {bench.args.w12_clients} connections"
    metrics = {Metric(LIMIT, label + ": server CPU per request", "µs", False): "cpu_us",
               Metric(LIMIT, label + ": of which in the kernel (stime)", "µs", False): "kernel_cpu_us",
               Metric(LIMIT, label + ": requests", "requests/s", True): "requests_per_s"}
    with running_answerer(answer_size) as (port, pid):
        for rep in range(bench.args.repetitions):
            print(f"W12 floor rep {rep + 1}", file=sys.stderr)
            bench.measure(side, metrics, "request_floor", port=port, pid=pid, frame=frame.hex(),
                          clients=bench.args.w12_clients, seconds=bench.args.w12_seconds)


def _security_overrides(ca: Path, broker_pem: Path) -> dict[str, str]:
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(broker_pem), "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca), "sasl.enabled.mechanisms": ",".join(W9_MECHANISMS),
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                f'user_{W9_USER}="{W9_PASSWORD}";'}


def security_client(protocol: str, mechanism: str | None, ca: Path) -> dict[str, str]:
    """librdkafka settings for one listener and SASL mechanism (OAUTHBEARER: its unsecured JWT)."""
    client = {"security.protocol": protocol}
    if protocol.endswith("SSL"):
        client["ssl.ca.location"] = str(ca)
    if mechanism == "OAUTHBEARER":
        client |= {"sasl.mechanism": mechanism, "enable.sasl.oauthbearer.unsecure.jwt": "true",
                   "sasl.oauthbearer.config": f"principal={W9_USER}"}
    elif mechanism is not None:
        client |= {"sasl.mechanism": mechanism, "sasl.username": W9_USER, "sasl.password": W9_PASSWORD}
    return client


def w9(bench: Bench, side: str) -> None:
    """W9 security: W1/W2's produce and consume (uncompressed, 1 partition) over each of --w9-protocols in
    one run, and the set-up time of a new connection for TLS alone and each SASL mechanism over SASL_SSL."""
    protocols = [name.strip().upper() for name in bench.args.w9_protocols.split(",") if name.strip()]
    throughput = {protocol: {Metric("W9 security", f"{protocol}: produce", "msgs/s", True): "produce",
                             Metric("W9 security", f"{protocol}: consume", "msgs/s", True): "consume"}
                  for protocol in protocols}
    setups: list[tuple[str, str | None]] = [("PLAINTEXT", None), ("SSL", None),
                                            *(("SASL_SSL", mechanism) for mechanism in W9_MECHANISMS)]
    set_up = {(protocol, mechanism): {
        Metric("W9 security", f"connection set-up, {protocol}{f' {mechanism}' if mechanism else ''}: p50", "ms",
               False): "p50_ms",
        Metric("W9 security", f"connection set-up, {protocol}{f' {mechanism}' if mechanism else ''}: p99", "ms",
               False): "p99_ms"} for protocol, mechanism in setups}
    if side == "tansu":
        for metrics in (*throughput.values(), *set_up.values()):
            for metric in metrics:
                bench.report.na(metric, side, "not set up with TLS or SASL here")
        return
    certs = make_dev_certs(Path(tempfile.mkdtemp(prefix="certs-", dir=bench.scratch)))
    workdir = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=bench.scratch))
    broker = PyBroker(workdir, _security_overrides(certs.ca, certs.broker), W9_LISTENERS)
    with running(broker, bench.args.timeout):
        run_load("scram_user", {"bootstrap": broker.bootstrap, "user": W9_USER, "password": W9_PASSWORD,
                                "iterations": 4096}, bench.args.timeout)
        run_load("warmup", {"bootstrap": broker.bootstrap}, bench.args.timeout)
        for rep in range(bench.args.repetitions):
            for protocol, metrics in throughput.items():
                print(f"W9 {protocol} rep {rep + 1}", file=sys.stderr)
                mechanism = W9_THROUGHPUT_MECHANISM if protocol.startswith("SASL") else None
                bench.measure(side, metrics, "produce_consume", bootstrap=f"127.0.0.1:{broker.ports[protocol]}",
                              topic=f"w9-{protocol.lower()}-{rep}", codec="none", partitions=1,
                              messages=bench.args.w9_messages, client=security_client(protocol, mechanism, certs.ca))
            for (protocol, mechanism), metrics in set_up.items():
                print(f"W9 set-up {protocol} {mechanism or ''} rep {rep + 1}", file=sys.stderr)
                bench.measure(side, metrics, "connect", bootstrap=f"localhost:{broker.ports[protocol]}",
                              connections=bench.args.w9_connections,
                              client=security_client(protocol, mechanism, certs.ca))
