"""`make chaos` in small: short rounds with fixed seeds must end clean, and the unclean-election +
power-loss round must be caught losing acknowledged writes (the checker can fail)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from chaos.faults import KINDS
from chaos.run import EXPECTED_LOSS, plan_of, run_round

# Seeds whose 20 s sequential schedules between them hit a leader kill, two brokers killed at once, pauses past
# replica.lag.time.max.ms and below it, a ZooKeeper restart, the controller isolated from the brokers and
# cut from ZooKeeper, and (seed 6) two brokers killed, then a power loss of the leader that is also the
# controller. Seed 6 was left out for losing acknowledged writes now and then: the leader came back within
# its ZooKeeper session and the next controller, elected after it registered again, kept it leader with its
# cut log (fixed in 980639d; test_power_loss.py makes that order every time, and the harness's
# controller-bounce fault too).
SMOKE_SEEDS = (2, 3, 6, 10)
# The shortest round in which a seed draws the very faults it draws in 20 s (chaos.faults.sequential ends the last one
# 3 s before the round does): seed 2's last ends at 13.3 s, seed 6's at 11.0 s; seeds 3 and 10 need all 20 s.
DURATIONS = {2: 16.5, 6: 14.0}
# A failing round's history and broker logs outlive pytest's own temporary directories.
KEEP = Path(tempfile.gettempdir()) / "pybroker-chaos-smoke"


def test_a_shortened_round_draws_the_faults_of_a_20_s_one() -> None:
    assert [seed for seed, duration in DURATIONS.items() if plan_of(seed, duration, partitions=3, generator="sequential")
            != plan_of(seed, 20.0, partitions=3, generator="sequential")] == []


@pytest.mark.parametrize("seed", SMOKE_SEEDS)
def test_short_chaos_round_is_clean(seed: int) -> None:
    result = run_round(seed, DURATIONS.get(seed, 20.0), partitions=3, generator="sequential", keep_dir=KEEP)
    assert result.schedule and all(f.kind in KINDS for f in result.schedule)
    assert result.verdict == "clean", f"seed {seed}: {result.verdict}; history kept in {result.kept}"
    stats = result.report.stats
    assert stats["acked"] > 100 and stats["drained"] + stats["compacted_away"] >= stats["acked"]


def test_unclean_election_after_power_loss_is_caught_losing_acked_writes() -> None:
    # Its one fault is fixed and waited for (faults.expected_loss_schedule); what follows it proves nothing.
    result = run_round(1000, 12.0, partitions=3, expect_loss=True, keep_dir=KEEP)
    assert result.verdict == EXPECTED_LOSS, result.verdict
    assert result.report.anomalies["lost"]
