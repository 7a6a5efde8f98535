"""The broker's cost per small request at a fixed offered rate, for builds of pybroker side by side.

W12 lets 8 clients run as fast as the broker answers, so its CPU per request moves with the rate the broker
happens to reach: at a low rate every request pays its own epoll wake-up and send/receive calls, at a high rate
one loop pass serves several connections (the same build measured 36-88 µs per empty Fetch at 3-20k requests/s).
Here one client thread sends W12's frames (the empty Fetch v16 of `empty_fetch_request`, or a one-message
Produce v9 with acks=-1) on `--connections` raw connections, one partition and at most one request in flight
each, at `--rates` requests/s spread evenly over time (connection i's requests at i/rate, i/rate + connections/rate,
...), so every build is measured at the same rate with the same spacing (rate 0: closed loop, as W12). Over each
window it runs `perf stat` on the broker (task-clock, context switches, system calls) and `perf record` for the
kernel's share of its CPU, and reads its utime+stime from /proc as a check; `--record` adds the top frames at
the highest rate, `--strace` a short `strace -c -f` for the system calls by name, `--floor` the same frames
answered by `sink.py --answer`. `--callgrind RATE` instead counts user-space instructions per request (this
VM's perf has no hardware counters), and those of the request's own path (`request Ir`: under uvloop's read
callback, without the timers that the whole count spreads over however many requests a loaded machine lets through).

    nice -n -10 .venv/bin/python -m benchmarks.paced --build pure=.:pure --build compiled=/tmp/built-tree -n 3

Builds take turns within each repetition, so a spell of load from elsewhere on the machine does not fall on one
build only. Not a test and not part of `make bench`: it prints a table and writes nothing else.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.brokers import HOST, PyBroker
from benchmarks.load import PAYLOAD, cpu_split, create_topic, empty_fetch_exchange, empty_fetch_request
from benchmarks.sink import running_answerer
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response_header, encode_request
from pybroker.protocol.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.protocol.messages.request_header import RequestHeader
from pybroker.records.record import build_batch

PERF = "/usr/bin/perf"
#: software events only: under a hypervisor without a virtual PMU (this machine) perf has no instruction counts
PERF_EVENTS = ("task-clock", "context-switches", "raw_syscalls:sys_enter")
#: callgrind's counts shown in the table: instructions, first-level instruction and data cache read misses, and
#: the instructions of a request's own path (`READ_CALLBACK`)
CALLGRIND_SHOWN = ("Ir", "I1mr", "D1mr", "request Ir")
#: uvloop's read callback, which runs a request from its bytes to its answer's write. The instructions under it per
#: call leave out the timers and idle callbacks that `Ir` spreads over the window's requests, whose share grows as
#: fewer are answered: on a loaded machine two runs of the same code differed by 2,000 in `Ir` per Produce and by
#: less than 800 here.
READ_CALLBACK = "__pyx_f_6uvloop_4loop___uv_stream_on_read"
PR_SET_TIMERSLACK = 29
PRODUCE_VERSION = 9
FETCH_VERSION = 16
METADATA_VERSION = 12


@dataclass(frozen=True)
class Build:
    """A tree of pybroker (with or without its compiled modules) and whether it runs as pure Python."""

    name: str
    tree: Path
    pure: bool

    @classmethod
    def parse(cls, text: str) -> Build:
        name, _, rest = text.partition("=")
        tree, _, flag = rest.partition(":")
        if not name or not tree or flag not in ("", "pure"):
            raise argparse.ArgumentTypeError(f"--build NAME=TREE[:pure], not {text!r}")
        return cls(name, Path(tree).resolve(), flag == "pure")


@dataclass
class Sample:
    """One window's figures per request."""

    rate: float
    user_us: float
    system_us: float
    figures: dict[str, float] = field(default_factory=dict)


Results = dict[tuple[str, str, float], list[Sample]]


def _header(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=0, client_id="paced")


def _answer(conn: socket.socket) -> memoryview:
    """One response frame (after its size prefix): the connection has one request in flight at most."""
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = conn.recv(65536)
        if not chunk:
            raise RuntimeError("the broker closed the connection")
        data += chunk
    if len(data) != 4 + int.from_bytes(data[:4], "big"):
        raise RuntimeError("more than one answer to one request")
    return memoryview(data)[4:]


def _exchange(conn: socket.socket, frame: bytes) -> memoryview:
    conn.sendall(frame)
    return _answer(conn)


def topic_id(port: int, topic: str) -> uuid.UUID:
    """The topic's id from a Metadata request (Fetch v13+ names topics by id)."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
    with socket.create_connection((HOST, port)) as conn:
        frame = _exchange(conn, encode_request(_header(ApiKey.METADATA, METADATA_VERSION), request, METADATA_VERSION))
    _, offset = decode_response_header(frame, ApiKey.METADATA, METADATA_VERSION)
    found = MetadataResponse.decode(frame[offset:], METADATA_VERSION).topics[0]
    if found.error_code:
        raise RuntimeError(f"Metadata of {topic}: error {found.error_code}")
    return found.topic_id


def frames(kind: str, port: int, topic: str, connections: int) -> list[bytes]:
    """One request frame per connection, each for a partition of its own."""
    if kind == "fetch":
        tid = topic_id(port, topic)
        return [encode_request(_header(ApiKey.FETCH, FETCH_VERSION), empty_fetch_request(tid, partition),
                               FETCH_VERSION) for partition in range(connections)]
    batch = build_batch([(None, PAYLOAD)])
    return [encode_request(_header(ApiKey.PRODUCE, PRODUCE_VERSION), ProduceRequest(
        transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])]),
        PRODUCE_VERSION) for partition in range(connections)]


def check_answer(kind: str, frame: memoryview) -> None:
    """The broker answers the frame without an error (checked once per connection, before the windows)."""
    api_key, version = (ApiKey.FETCH, FETCH_VERSION) if kind == "fetch" else (ApiKey.PRODUCE, PRODUCE_VERSION)
    _, offset = decode_response_header(frame, api_key, version)
    if kind == "fetch":
        fetched = FetchResponse.decode(frame[offset:], version)
        errors = [fetched.error_code, *(p.error_code for t in fetched.responses for p in t.partitions)]
    else:
        produced = ProduceResponse.decode(frame[offset:], version)
        errors = [p.error_code for t in produced.responses for p in t.partition_responses]
    if any(errors):
        raise RuntimeError(f"{kind} answered with error codes {errors}")


class Pacer(threading.Thread):
    """Sends on `conns` in turn, one request every 1/`rate` s on a fixed schedule; before a connection's next
    request it reads the answer to its last one. Ticks missed while the client or the broker was held up are
    caught up at once while they are within one round of the connections, and skipped beyond (so a stall is
    not followed by a long burst, which one loop pass would serve); `skipped` counts them. Rate 0: closed loop,
    each connection's next request sent as soon as the client has its answer, as in W12."""

    def __init__(self, conns: list[socket.socket], frames: list[bytes], rate: float) -> None:
        super().__init__(daemon=True)
        self.conns, self.frames = conns, frames
        self.period = 1.0 / rate if rate else 0.0
        self.late = self.period * len(conns) if rate else math.inf
        self.answered = 0
        self.skipped = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            self._pace()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _pace(self) -> None:
        waiting = [False] * len(self.conns)
        tick, next_at = 0, time.perf_counter()
        while not self._halt.is_set():
            now = time.perf_counter()
            if now < next_at:
                time.sleep(next_at - now)
            elif now - next_at > self.late:
                missed = int((now - next_at) / self.period)
                self.skipped += missed
                tick += missed
                next_at += missed * self.period
            index = tick % len(self.conns)
            if waiting[index]:
                _answer(self.conns[index])
                self.answered += 1
            self.conns[index].sendall(self.frames[index])
            waiting[index] = True
            tick += 1
            next_at += self.period
        for conn, answer_pending in zip(self.conns, waiting, strict=True):
            if answer_pending:  # the next pacer on these connections starts with none in flight
                _answer(conn)

    def stop(self) -> None:
        self._halt.set()
        self.join()
        if self.error is not None:
            raise self.error


@contextmanager
def perf_stat(pid: int) -> Iterator[dict[str, float]]:
    """`perf stat` attached to `pid` (all its threads) for the with-block; the counts land in the dict."""
    counts: dict[str, float] = {}
    with tempfile.NamedTemporaryFile("r", suffix=".perf") as out:
        perf = subprocess.Popen([PERF, "stat", "-x", ",", "-o", out.name, "-e", ",".join(PERF_EVENTS),
                                 "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.2)  # attached
        started = time.perf_counter()
        try:
            yield counts
        finally:
            perf.send_signal(signal.SIGINT)
            _, err = perf.communicate(timeout=30)
            counts["perf_seconds"] = time.perf_counter() - started + 0.2
        for line in out.read().splitlines():
            cells = line.split(",")
            if len(cells) > 2 and cells[2] in PERF_EVENTS:
                if cells[0] in ("<not counted>", "<not supported>"):
                    raise RuntimeError(f"perf could not count {cells[2]}: {err.decode(errors='replace')}")
                counts[cells[2]] = float(cells[0])
    missing = [event for event in PERF_EVENTS if event not in counts]
    if missing:
        raise RuntimeError(f"perf stat gave no {missing}: {err.decode(errors='replace')[-300:]}")


@contextmanager
def kernel_share(pid: int) -> Iterator[list[float]]:
    """The share of `pid`'s on-CPU samples taken in the kernel over the with-block (`perf record` of cpu-clock at
    997 Hz, a rate no request rate here is a multiple of). /proc's utime/stime split cannot be used: it samples
    at the scheduler tick, and requests sent on a schedule in step with the tick are caught at the same point
    of their handling every time (10k requests/s measured 6 µs user and 62 µs system, then 52 and 23)."""
    share: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "perf.data"
        record = subprocess.Popen([PERF, "record", "-q", "-F", "997", "-e", "cpu-clock", "-o", str(data),
                                   "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield share
        finally:
            record.send_signal(signal.SIGINT)
            record.wait(timeout=30)
        modes = subprocess.run([PERF, "report", "-i", str(data), "--stdio", "--sort", "dso", "-F", "sample,dso"],
                               check=True, capture_output=True, text=True).stdout
    samples = {line.split()[1]: int(line.split()[0]) for line in modes.splitlines()
               if line.strip() and not line.startswith("#") and len(line.split()) == 2}
    share.append(samples.get("[kernel.kallsyms]", 0) / max(1, sum(samples.values())))


def measure(pid: int, pacer: Pacer, seconds: float) -> Sample:
    """One window of `seconds`: the broker's CPU per request answered from perf (task-clock, split into user and
    kernel time by `kernel_share`), its context switches and system calls, and /proc's utime+stime as a check."""
    with perf_stat(pid) as counts, kernel_share(pid) as share:
        (user, system), answered, started = cpu_split(pid), pacer.answered, time.perf_counter()
        time.sleep(seconds)
        (user_end, system_end), answered_end = cpu_split(pid), pacer.answered
        elapsed = time.perf_counter() - started
    requests = answered_end - answered
    rate = requests / elapsed
    perf_requests = rate * counts.pop("perf_seconds")  # perf's window is a little longer, at the same rate
    cpu_us = counts["task-clock"] * 1e3 / perf_requests  # perf gives msec
    figures = {
        "/proc utime+stime µs": (user_end - user + system_end - system) / requests * 1e6,
        "context switches": counts["context-switches"] / perf_requests,
        "syscalls": counts["raw_syscalls:sys_enter"] / perf_requests,
    }
    return Sample(rate, cpu_us * (1 - share[0]), cpu_us * share[0], figures)


def perf_record(pid: int, seconds: float, top: int) -> str:
    """The broker's self time over `seconds` by shared object (the interpreter, the compiled modules' library,
    the kernel, uvloop), then its `top` functions: cpu-clock samples at 1999 Hz (Python here is built without
    frame pointers, so call graphs would not say more)."""
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "perf.data"
        subprocess.run([PERF, "record", "-q", "-F", "1999", "-e", "cpu-clock", "-o", str(data), "-p", str(pid),
                        "--", "sleep", str(seconds)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        reports = [subprocess.run([PERF, "report", "-i", str(data), "--stdio", "--sort", sort, "-F",
                                   f"sample,overhead,{sort}"], check=True, capture_output=True, text=True).stdout
                   for sort in ("dso", "dso,sym")]
    by_dso, by_symbol = (sorted((line for line in report.splitlines() if line.strip() and not line.startswith("#")),
                                key=lambda line: -int(line.split()[0])) for report in reports)
    return "\n".join([*by_dso[:6], *by_symbol[:top]])


def strace_counts(pid: int, seconds: float) -> str:
    """`strace -c -f` of the broker for `seconds` (it slows the broker: counts only, no timing)."""
    strace = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    time.sleep(seconds)
    strace.send_signal(signal.SIGINT)
    _, err = strace.communicate(timeout=30)
    return err


class _Wrapped(PyBroker):
    """pybroker started under another program (valgrind)."""

    def __init__(self, workdir: Path, wrapper: list[str]) -> None:
        super().__init__(workdir)
        self.wrapper = wrapper

    def command(self) -> list[str]:
        return [*self.wrapper, *super().command()]


@contextmanager
def running(build: Build, scratch: Path, wrapper: list[str] | None = None) -> Iterator[PyBroker]:
    """A broker of `build`, started from its tree (so its compiled modules, or none, are imported)."""
    workdir = scratch / build.name
    workdir.mkdir(parents=True)
    broker = PyBroker(workdir) if wrapper is None else _Wrapped(workdir, wrapper)
    broker.cwd = build.tree
    broker.env = {"PYBROKER_PURE_PYTHON": "1"} if build.pure else {}
    broker.start(timeout=60.0 if wrapper is None else 900.0)
    try:
        yield broker
    finally:
        broker.stop()


def connect(port: int, count: int) -> list[socket.socket]:
    conns = []
    for _ in range(count):
        conn = socket.create_connection((HOST, port))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(conn)
    return conns


def run_build(build: Build, args: argparse.Namespace, scratch: Path, record: bool, results: Results) -> None:
    with running(build, scratch) as broker:
        described = [line for line in (broker.workdir / "pybroker.log").read_text().splitlines()
                     if "pure Python" in line or "compiled (mypyc)" in line]
        print(f"  {build.name}: {described[0].strip()[-160:] if described else '(build not logged)'}",
              file=sys.stderr)
        topic = f"paced-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, args.connections, 60.0)
        sent = {kind: frames(kind, broker.port, topic, args.connections) for kind in args.kinds}
        run_target(build.name, broker.pid, broker.port, sent, True, args, record, results)


def run_callgrind(build: Build, args: argparse.Namespace, scratch: Path) -> dict[str, float]:
    """The user-space instructions per request of `build` (callgrind's Ir; this machine's perf has no
    instruction counter) and its simulated cache misses (I1mr: first-level instruction cache), at `--callgrind`
    requests/s, where every request is served by a loop pass of its own as at the rates above. Instrumented only
    from the warm-up of each kind on, counters zeroed at the window."""
    out = scratch / f"callgrind-{build.name}"
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--cache-sim=yes",
               f"--callgrind-out-file={out}.%p"]
    per_request: dict[str, float] = {}
    with running(build, scratch, wrapper) as broker:
        topic = f"paced-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, args.connections, 600.0)
        for kind in args.kinds:
            kind_frames = frames(kind, broker.port, topic, args.connections)
            conns = connect(broker.port, args.connections)
            try:
                for conn, frame in zip(conns, kind_frames, strict=True):
                    check_answer(kind, _exchange(conn, frame))
                _callgrind_control(broker.pid, "--instr=on")
                pacer = Pacer(conns, kind_frames, args.callgrind)
                pacer.start()
                try:
                    time.sleep(max(args.warmup, 3.0))
                    _callgrind_control(broker.pid, "--zero")
                    answered = pacer.answered
                    time.sleep(args.seconds * 2)
                    answered = pacer.answered - answered
                    dumps = set(out.parent.glob(out.name + ".*"))
                    _callgrind_control(broker.pid, "--dump")
                finally:
                    pacer.stop()
                _callgrind_control(broker.pid, "--instr=off")
                dump, = set(out.parent.glob(out.name + ".*")) - dumps
                if args.callgrind_keep is not None:
                    args.callgrind_keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(dump, args.callgrind_keep / f"callgrind.{build.name}.{kind}")
                lines = dump.read_text().splitlines()
                events = next(line for line in lines if line.startswith("events:")).split()[1:]
                totals = next(line for line in lines if line.startswith(("totals:", "summary:"))).split()[1:]
                counts = {event: int(total) / answered for event, total in zip(events, totals, strict=False)}
                counts["request Ir"] = _read_callback_ir(dump)
                per_request |= {f"{kind} {event}": count for event, count in counts.items()}
                print(f"  {build.name} {kind} {args.callgrind:.0f}/s under callgrind: {answered} answered; per "
                      f"request: " + ", ".join(f"{event} {count:,.0f}" for event, count in counts.items()),
                      file=sys.stderr)
            finally:
                for conn in conns:
                    conn.close()
    return per_request


def _read_callback_ir(dump: Path) -> float:
    """The instructions per call under `READ_CALLBACK` in a callgrind dump (callgrind_annotate's call tree:
    each caller's line of it gives its calls and their inclusive count); NaN when no call was recorded."""
    tree = subprocess.run(["callgrind_annotate", "--tree=calling", "--show=Ir", "--threshold=100", str(dump)],
                          check=True, capture_output=True, text=True, timeout=300).stdout
    instructions = calls = 0
    for match in re.finditer(rf"^\s*([\d,]+) .*>\s+\S*:{READ_CALLBACK} \(([\d,]+)x\)", tree, re.MULTILINE):
        instructions += int(match[1].replace(",", ""))
        calls += int(match[2].replace(",", ""))
    return instructions / calls if calls else math.nan


def _callgrind_control(pid: int, option: str) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True, stdout=subprocess.DEVNULL, timeout=120)


def run_floor(args: argparse.Namespace, record: bool, results: Results) -> None:
    """The empty Fetch answered with canned bytes by `benchmarks.sink`'s bare uvloop server: W12's floor at the
    same rates, and a check that the client keeps them."""
    frame, answer_size = empty_fetch_exchange()
    with running_answerer(answer_size) as (port, pid):
        run_target("floor", pid, port, {"fetch": [frame] * args.connections}, False, args, record, results)


def run_target(name: str, pid: int, port: int, sent: dict[str, list[bytes]], check: bool,
               args: argparse.Namespace, record: bool, results: Results) -> None:
    """Each kind's frames at each rate on fresh connections to `port`; the server `pid` measured."""
    for kind, kind_frames in sent.items():
        conns = connect(port, args.connections)
        try:
            if check:
                for conn, frame in zip(conns, kind_frames, strict=True):
                    check_answer(kind, _exchange(conn, frame))
            for rate in args.rates:
                pacer = Pacer(conns, kind_frames, rate)
                pacer.start()
                try:
                    time.sleep(args.warmup)
                    sample = measure(pid, pacer, args.seconds)
                    if record and rate == max(args.rates):
                        print(f"  perf record, {name} {kind} {_rate(rate)}:\n"
                              + perf_record(pid, args.seconds, args.top), file=sys.stderr)
                    if args.strace and rate == max(args.rates):
                        print(f"  strace -c, {name} {kind} {_rate(rate)}:\n" + strace_counts(pid, 2.0),
                              file=sys.stderr)
                finally:
                    pacer.stop()
                results.setdefault((name, kind, rate), []).append(sample)
                print(f"  {name} {kind} {_rate(rate)}: {sample.rate:,.0f}/s answered (skipped {pacer.skipped}), "
                      f"CPU {sample.user_us + sample.system_us:.1f} µs: user {sample.user_us:.1f}, "
                      f"system {sample.system_us:.1f}; "
                      + ", ".join(f"{k} {v:,.1f}" for k, v in sample.figures.items()), file=sys.stderr)
        finally:
            for conn in conns:
                conn.close()


def _rate(rate: float) -> str:
    return f"{rate:,.0f}/s" if rate else "closed loop"


def table(results: Results) -> str:
    """Medians per build, kind and offered rate, [min-max] beside each."""
    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):,.1f} [{min(values):,.1f}-{max(values):,.1f}]"

    rows = []
    for (name, kind, rate), samples in sorted(results.items(), key=lambda item: (item[0][1], item[0][2])):
        figures = {"answered/s": [s.rate for s in samples],
                   "CPU µs": [s.user_us + s.system_us for s in samples], "user µs": [s.user_us for s in samples],
                   "system µs": [s.system_us for s in samples],
                   **{key: [s.figures[key] for s in samples] for key in samples[0].figures}}
        rows.append(f"{kind} {_rate(rate)} {name} (n={len(samples)}): "
                    + "; ".join(f"{key} {cell(values)}" for key, values in figures.items()))
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", type=Build.parse, action="append", required=True, dest="builds",
                        help="NAME=TREE[:pure]: a pybroker tree to start the broker from; :pure sets "
                             "PYBROKER_PURE_PYTHON=1")
    parser.add_argument("--rates", type=lambda text: [float(r) for r in text.split(",")], default=[5000, 10000],
                        help="offered requests/s, comma-separated; 0: closed loop (as fast as the broker answers)")
    parser.add_argument("--kinds", type=lambda text: text.split(","), default=["fetch", "produce"],
                        help="fetch (empty Fetch v16), produce (one message, acks=-1), comma-separated")
    parser.add_argument("--connections", type=int, default=8, help="connections, one partition each")
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement window")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds at the rate before each window")
    parser.add_argument("--floor", action="store_true",
                        help="also the empty Fetch answered with canned bytes by a bare uvloop server")
    parser.add_argument("--callgrind", type=float, metavar="RATE",
                        help="instead: user-space instructions per request under callgrind at RATE requests/s")
    parser.add_argument("--callgrind-keep", type=Path, metavar="DIR",
                        help="with --callgrind: copy each dump to DIR (for callgrind_annotate)")
    parser.add_argument("-n", "--repetitions", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="top frames (perf record) in the last repetition")
    parser.add_argument("--top", type=int, default=25, help="frames perf record shows")
    parser.add_argument("--strace", action="store_true", help="strace -c -f for 2 s at the highest rate")
    args = parser.parse_args()
    if any(kind not in ("fetch", "produce") for kind in args.kinds):
        parser.error("--kinds: fetch, produce")
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)  # 1 µs: sleeps end on time
    results: Results = {}
    with tempfile.TemporaryDirectory(prefix="paced-") as scratch:
        if args.callgrind:
            instructions = {build.name: run_callgrind(build, args, Path(scratch)) for build in args.builds}
            print("\n".join(f"{kind} {args.callgrind:,.0f}/s {name}, per request: " + ", ".join(
                f"{event} {counts[f'{kind} {event}']:,.0f}" for event in CALLGRIND_SHOWN)
                for name, counts in instructions.items() for kind in args.kinds))
            return
        for rep in range(args.repetitions):
            for build in args.builds:
                print(f"rep {rep + 1} {build.name}; {os.getloadavg()[0]:.2f} load", file=sys.stderr)
                run_build(build, args, Path(scratch) / f"{rep}", args.record and rep == args.repetitions - 1,
                          results)
            if args.floor:
                print(f"rep {rep + 1} floor; {os.getloadavg()[0]:.2f} load", file=sys.stderr)
                run_floor(args, False, results)
    print(table(results))


if __name__ == "__main__":
    main()
