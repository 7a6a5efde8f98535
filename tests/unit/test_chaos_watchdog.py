"""The chaos watchdog (chaos/watchdog.py): a round that never ends, even one stuck in native code holding
the GIL as librdkafka #4041 left a round, is killed with every process it started (a broker in a session
of its own among them) and reported with its threads' stacks; a round that ends gives its value back."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from chaos import run
from chaos.watchdog import Bounded, Hang, RoundProcessError, gone, run_bounded

BOUND_S = 5.0  # what the hanging round gets before it is killed (it spawns one process, then hangs)


def _hang_holding_the_gil(pid_file: Path) -> None:
    """Start a 'broker' in its own session, then wait forever in C with the GIL held (libc's sleep through
    ctypes.PyDLL keeps the GIL, as confluent-kafka's callback did around rd_kafka_rebalance_protocol)."""
    broker = subprocess.Popen(["sleep", "600"], start_new_session=True)
    pid_file.write_text(str(broker.pid))
    libc = ctypes.PyDLL(None)
    while True:
        libc.sleep(600)


def test_a_round_that_ends_gives_its_value_back(tmp_path: Path) -> None:
    assert run_bounded(lambda: {"verdict": "clean"}, 60.0, tmp_path / "stacks.txt") == Bounded({"verdict": "clean"})


def test_a_round_that_raises_raises_in_the_parent(tmp_path: Path) -> None:
    def broken() -> None:
        raise ValueError("no cluster")

    with pytest.raises(RoundProcessError, match="ValueError: no cluster"):
        run_bounded(broken, 60.0, tmp_path / "stacks.txt")


def test_a_round_hung_holding_the_gil_is_killed_with_its_processes_and_its_stacks_reported(tmp_path: Path) -> None:
    pid_file = tmp_path / "broker.pid"
    outcome = run_bounded(lambda: _hang_holding_the_gil(pid_file), BOUND_S, tmp_path / "stacks.txt")
    assert isinstance(outcome, Hang), outcome
    assert pid_file.exists(), f"the round did not start its broker within {BOUND_S} s"
    broker = int(pid_file.read_text())
    assert broker in outcome.killed and len(outcome.killed) >= 2  # the round's process and its broker
    assert "_hang_holding_the_gil" in outcome.stacks, outcome.stacks
    assert gone(broker)  # run_bounded returns once what it killed is gone


def test_a_hung_round_is_a_harness_hang_kept_with_its_stacks_not_clean_and_not_a_finding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "broker.pid"
    monkeypatch.setattr(run, "run_round", lambda *args, **kwargs: _hang_holding_the_gil(pid_file))
    lines: list[str] = []
    result = run.bounded_round(7, 10.0, bound=BOUND_S, keep_dir=tmp_path / "kept", log=lines.append,
                               partitions=3, generator="sequential")
    assert result.verdict.startswith(run.HARNESS_HANG), result.verdict
    assert not result.ok and not result.caught
    assert result.schedule == run.plan_of(7, 10.0, partitions=3, generator="sequential")
    assert result.kept is not None and "_hang_holding_the_gil" in (result.kept / "stacks.txt").read_text()
    assert any("_hang_holding_the_gil" in line for line in lines)
    assert gone(int(pid_file.read_text()))
