"""The planted bugs (chaos/mutants/*.patch) still apply to the code as it is, each changes a few lines of
pybroker/ only, and the patched copy compiles: a refactor that moves the code they touch fails here,
naming the mutant, instead of leaving `make chaos-mutants` to run an unchanged broker."""

from __future__ import annotations

import compileall
import re
from pathlib import Path

import pytest

from chaos.checker import Report
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
