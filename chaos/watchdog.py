"""A round in a process of its own, killed with every process under it when it does not end in time.

A client library can stop a round for good: librdkafka's rd_kafka_rebalance_protocol(), which
confluent-kafka calls from its rebalance callback while a consumer closes, waited forever holding the
GIL (librdkafka #4041), so every thread of the round stood still, a broker stayed down and `make chaos`
never ended. A watchdog thread in the same process would wait for the GIL too. So the round runs in a
forked child; the parent waits for its result up to a bound, and past it has the child write its threads'
stacks (faulthandler writes them from its signal handler, without the GIL), then stops and kills the child
and every process under it (brokers and ZooKeeper run in sessions of their own, so its process group is
not enough), and reports a `Hang`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable, Generic, TypeVar

T = TypeVar("T")
STACKS_WAIT_S = 5.0  # for the child's signal handler to have written every thread's stack
KILL_WAIT_S = 30.0  # for SIGKILLed processes to be gone


@dataclass(frozen=True)
class Hang:
    """The round did not end within `bound` seconds: what its threads were doing, and what was killed."""

    bound: float
    stacks: str
    killed: list[int]


@dataclass(frozen=True)
class Bounded(Generic[T]):
    value: T


class RoundProcessError(RuntimeError):
    """The round's process raised, or died without a result."""


def run_bounded(target: Callable[[], T], bound: float, stacks_path: Path) -> Bounded[T] | Hang:
    """`target()` in a forked child; its value, or a Hang after `bound` seconds (its stacks written to
    `stacks_path`, the child and everything under it killed). An exception in the child is raised here as
    RoundProcessError."""
    sys.stdout.flush()
    sys.stderr.flush()  # the child inherits unwritten buffers otherwise, and writes them twice
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(target, send, stacks_path), name="chaos-round")
    child.start()
    send.close()
    pid = child.pid
    assert pid is not None  # started
    try:
        if receive.poll(bound):
            return _result(receive, child)
        os.kill(pid, signal.SIGUSR1)
        stacks = _settled_text(stacks_path, STACKS_WAIT_S)
        killed = kill_tree(pid)
        child.join()
        return Hang(bound, stacks, killed)
    finally:
        receive.close()


def _result(receive: Connection, child: multiprocessing.process.BaseProcess) -> Bounded:
    try:
        kind, value = receive.recv()
    except EOFError:
        child.join()
        raise RoundProcessError(f"the round's process exited ({child.exitcode}) without a result") from None
    child.join()
    if kind == "error":
        raise RoundProcessError(value)
    return Bounded(value)


def _child(target: Callable[[], T], send: Connection, stacks_path: Path) -> None:
    with open(stacks_path, "w") as stacks:
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        try:
            outcome: tuple[str, object] = ("ok", target())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
            outcome = ("error", f"{type(exc).__name__}: {exc}")
        send.send(outcome)
        send.close()


def _settled_text(path: Path, timeout: float) -> str:
    """The file's text once it has stopped growing (a signal handler writes it), or what it holds at
    `timeout`."""
    deadline = time.monotonic() + timeout
    size = -1
    while time.monotonic() < deadline:
        now = path.stat().st_size if path.exists() else 0
        if now and now == size:
            break
        size = now
        time.sleep(0.2)
    return path.read_text(errors="replace") if path.exists() else ""


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children, theirs, ...), from /proc, whatever session they run in."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # after "pid (comm)": state, ppid
        children[parent].append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int, timeout: float = KILL_WAIT_S) -> list[int]:
    """Stop `pid` and everything under it (so that nothing starts another process meanwhile), kill them
    all and wait (up to `timeout`) until they are gone, their ports and files let go; the pids killed."""
    tree: list[int] = []
    while True:
        more = [p for p in [pid, *descendants(pid)] if p not in tree]
        if not more:
            break
        for p in more:
            _signal(p, signal.SIGSTOP)
        tree += more
    for p in reversed(tree):
        _signal(p, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while not all(gone(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    return tree


def gone(pid: int) -> bool:
    """No such process, or a dead one not yet reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone already
        os.kill(pid, sig)
