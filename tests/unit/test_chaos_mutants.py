"""The planted bugs (chaos/mutants/*.patch) still apply to the code as it is, each changes a few lines of
pybroker/ only, and the patched copy compiles: a refactor that moves the code they touch fails here,
naming the mutant, instead of leaving `make chaos-mutants` to run an unchanged broker."""

from __future__ import annotations

import compileall
import random
import re
import signal
from pathlib import Path
from typing import Any

import pytest

import chaos.mutants.__main__ as mutants_main
from chaos import cluster
from chaos.checker import Report
from chaos.cluster import REPO, Broker
from chaos.mutants import MUTANTS, PatchError, apply_to, planted
from chaos.run import RoundResult

MAX_CHANGED_LINES = 6


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_applies_to_pybroker_and_compiles(mutant) -> None:
    text = mutant.patch.read_text()
    files = re.findall(r"^\+\+\+ b/(\S+)", text, re.MULTILINE)
    assert files and all(f.startswith("pybroker/") for f in files), files
    changed = [line for line in text.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert 0 < len(changed) <= MAX_CHANGED_LINES, f"{mutant.name}: {len(changed)} changed lines, keep it small"
    with planted(mutant) as root:
        for name in files:
            assert (root / name).read_text() != (Path(__file__).resolve().parents[2] / name).read_text()
            assert compileall.compile_file(str(root / name), quiet=1)


def test_a_patch_that_no_longer_applies_fails_naming_its_mutant(tmp_path: Path) -> None:
    (tmp_path / "pybroker").mkdir()
    with pytest.raises(PatchError, match=MUTANTS[0].name):
        apply_to(MUTANTS[0], tmp_path)


def test_a_share_anomaly_catches_a_mutant_and_an_unfinished_share_drain_does_not() -> None:
    """The share mutant (released-before-written) is caught by the share checker's anomalies, which a round
    without the share workload never reports."""
    def result(**anomalies: list[object]) -> RoundResult:
        report = Report()
        report.anomalies.update(anomalies)
        return RoundResult(11, [], "anomalies", report)

    assert result(share_count_back=[{"offset": 0}]).caught
    assert not result(share_unacknowledged=[{"offset": 0}]).caught
    assert not result().caught


def test_a_control_round_with_a_safety_anomaly_on_the_unpatched_code_fails_the_run(monkeypatch, capsys) -> None:
    """--control runs the catching round again on the repository's code: the catch is the planted bug's only
    when that round is clean; one that is not names the mutant and fails the run as a miss does."""
    rounds: list[tuple[int, Path]] = []

    def fake_round(seed: int, _duration: float, *, code_root: Path, **_options: object) -> RoundResult:
        rounds.append((seed, code_root))
        report = Report()
        if (code_root != REPO and seed == 12) or (code_root == REPO and dirty):
            report.anomalies["lost"] = [{"offset": 0}]
        return RoundResult(seed, [], "anomalies" if report.anomalies else "clean", report)

    monkeypatch.setattr(mutants_main, "bounded_round", fake_round)
    monkeypatch.setattr(signal, "signal", lambda *_args: None)  # main's SIGTERM handler is not this process's
    mutant = MUTANTS[0]
    dirty = False
    assert mutants_main.main(["--only", mutant.name, "--control"]) == 0
    assert [seed for seed, _ in rounds] == [11, 12, 12] and rounds[-1][1] == REPO  # the control: the catch's seed
    assert rounds[0][1] != REPO
    assert "CONTROL NOT CLEAN" not in capsys.readouterr().out
    dirty = True
    assert mutants_main.main(["--only", mutant.name, "--control"]) == 1
    assert f"CONTROL NOT CLEAN (the unpatched code, same round): {mutant.name}" in capsys.readouterr().out


def test_every_round_of_a_mutants_run_has_a_seed_of_its_own_printed_with_how_to_replay_it(monkeypatch, capsys) -> None:
    """A round's seed comes from the run's (--seed) and the round: no two rounds of a run share one (they did:
    every mutant ran seeds 11, 12, 13), the control reruns its round's, and each is printed with the
    `python -m chaos` command that replays that round alone (on the unpatched code)."""
    rounds: list[tuple[int, dict[str, Any]]] = []

    def fake_round(seed: int, duration: float, **options: Any) -> RoundResult:
        rounds.append((seed, options))
        return RoundResult(seed, [], "clean", Report())

    monkeypatch.setattr(mutants_main, "bounded_round", fake_round)
    monkeypatch.setattr(signal, "signal", lambda *_args: None)
    assert mutants_main.main(["--every-seed", "--control"]) == 1  # nothing caught
    out = capsys.readouterr().out
    controls = [seed for seed, options in rounds if options["code_root"] == REPO]
    seeds = [seed for seed, options in rounds if options["code_root"] != REPO]
    assert len(controls) == len(MUTANTS) and len(seeds) == sum(m.rounds for m in MUTANTS)
    assert len(set(seeds)) == len(seeds), sorted(seeds)
    for mutant in MUTANTS:
        assert mutant.seeds(mutants_main.SEED)[0] in controls  # its control: its first round's seed (none caught)
        seed = mutant.seeds(mutants_main.SEED)[-1]
        assert (f"python -m chaos --rounds 1 --no-expected-loss --seed {seed} --duration 30 --partitions 6 "
                f"--schedule {mutant.generator} --kinds {','.join(mutant.kinds)}") in out
    rounds.clear()
    assert mutants_main.main(["--only", MUTANTS[0].name, "--seed", "500"]) == 1
    assert [seed for seed, _ in rounds] == list(MUTANTS[0].seeds(500)) and MUTANTS[0].seeds(500)[0] == 500


class _UnstartedZooKeeper:
    """A round's ZooKeeper that is never started: these rounds end before a broker needs it."""

    port = 1
    process = None

    def __init__(self, _data_dir: Path) -> None:
        pass

    def start(self) -> "_UnstartedZooKeeper":
        return self

    def stop(self) -> None:
        pass


def test_each_round_listens_on_ports_of_its_own_and_draws_from_its_own_seed(monkeypatch, tmp_path: Path) -> None:
    """Each round runs in a process forked from the run's (watchdog.py), which inherited the same place in the
    test ports' cycle and the same `random` state: every round of a run (its --control rerun too) listened on
    the same ports, where a previous round's broker slow to die could still be, and drew the same `random`
    sequence. Here a round's brokers say where they would listen, and the round ends at its third."""
    listening: list[int] = []  # in each round's process, its own copy

    def start(broker: Broker, timeout: float = 30.0) -> None:
        listening.append(broker.port)
        if len(listening) == 3:
            raise RuntimeError(f"ports {listening} random {random.random()}")

    monkeypatch.setattr(cluster, "ZooKeeperServer", _UnstartedZooKeeper)
    monkeypatch.setattr(Broker, "start", start)
    monkeypatch.setattr(signal, "signal", lambda *_args: None)
    results: list[RoundResult] = []
    real_round = mutants_main.bounded_round

    def bounded_round(*args: Any, **options: Any) -> RoundResult:
        results.append(real_round(*args, **options))
        return results[-1]

    monkeypatch.setattr(mutants_main, "bounded_round", bounded_round)
    mutant = MUTANTS[0]
    assert mutants_main.main(["--only", mutant.name, "--control", "--keep-dir", str(tmp_path)]) == 1
    drawn = [re.search(r"ports \[(.*)\] random (\S+)", r.verdict) for r in results]
    assert all(drawn), [r.verdict for r in results]
    ports = [int(port) for found in drawn if found for port in found[1].split(", ")]
    assert len(ports) == 3 * len(results) == 3 * 4 and len(set(ports)) == len(ports), ports
    draws = [found[2] for found in drawn if found]
    assert len(set(draws[:-1])) == len(draws) - 1, draws  # one sequence per seed...
    assert draws[-1] == draws[0]  # ...and the control, at its round's seed, draws that round's
