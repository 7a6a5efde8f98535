"""The planted bugs (chaos/mutants/*.patch) still apply to the code as it is, each changes a few lines of
pybroker/ only, and the patched copy compiles: a refactor that moves the code they touch fails here,
naming the mutant, instead of leaving `make chaos-mutants` to run an unchanged broker."""

from __future__ import annotations

import compileall
import re
import signal
from pathlib import Path

import pytest

import chaos.mutants.__main__ as mutants_main
from chaos.checker import Report
from chaos.cluster import REPO
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
