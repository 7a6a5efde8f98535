"""share-stall-then-kill's choice of a share-partition (chaos/share_aim.py), and a skipped fault counted as such: a
round that found nothing to aim at is reported, and the mutant runner counts it as not exercised, not clean."""

from __future__ import annotations

import random
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

import chaos.mutants.__main__ as mutants_main
from chaos.checker import Report
from chaos.mutants import BY_NAME
from chaos.run import RoundResult, skipped_faults, table
from chaos.share_aim import Aim, ShareView, aim, moved_replicas, state_read_since, unaimed

ALL = {0, 1, 2}


def view(partition: int, leader: int, coordinator: int, isr: tuple[int, ...] = (0, 1, 2)) -> ShareView:
    return ShareView(partition, leader, moved_replicas((0, 1, 2), leader) if leader >= 0 else (0, 1, 2), isr,
                     coordinator)


def test_a_read_partition_led_apart_from_its_coordinator_is_chosen_as_it_is() -> None:
    views = [view(0, 1, 1), view(1, 2, 0)]
    assert aim(views, {0, 1}, ALL, random.Random(1)) == Aim(1, 2, 0)


def test_a_partition_nobody_read_is_not_chosen_though_led_apart_and_no_leader_moves_until_all_are_read() -> None:
    views = [view(0, 1, 1), view(1, 2, 0)]
    assert aim(views, {0}, ALL, random.Random(1)) is None
    assert "the others not read yet" in unaimed(views, {0}, ALL)
    chosen = aim(views, {0}, ALL, random.Random(1), hurry=True)  # the look went on long enough: p0 moves
    assert chosen is not None and chosen.partition == 0 and chosen.moved_from == 1 and chosen.leader in (0, 2)


@pytest.mark.parametrize("seed", range(20))
def test_when_every_read_leader_is_its_coordinator_one_moves_to_a_live_in_sync_replica_apart(seed: int) -> None:
    views = [view(0, 1, 1, isr=(1, 2)), view(1, 2, 2, isr=(0, 1, 2))]
    chosen = aim(views, {0, 1}, {1, 2}, random.Random(seed))  # broker 0 down
    assert chosen is not None and chosen.moved_from == chosen.coordinator
    assert chosen.leader != chosen.coordinator
    assert chosen.leader in views[chosen.partition].isr and chosen.leader in {1, 2}


def test_nothing_to_aim_at_says_why() -> None:
    assert aim([], set(), ALL, random.Random(1)) is None
    assert "no share-partition read yet" in unaimed([], set(), ALL)
    no_state = [view(0, 1, -1), view(1, 2, -1)]
    assert aim(no_state, {0, 1}, ALL, random.Random(1)) is None
    assert "no share coordinator yet" in unaimed(no_state, {0, 1}, ALL)
    alone = [view(0, 1, 1, isr=(1,)), view(1, 2, 2, isr=(2, 0))]  # broker 0 in p1's ISR but down
    assert aim(alone, {0, 1}, {1, 2}, random.Random(1)) is None
    assert "every read share-partition led by its coordinator" in unaimed(alone, {0, 1}, {1, 2})
    leaderless = [view(0, -1, 1)]
    assert aim(leaderless, {0}, ALL, random.Random(1)) is None
    assert "without a leader or coordinator" in unaimed(leaderless, {0}, ALL)


def test_the_moved_assignment_keeps_its_replicas_with_the_new_leader_first() -> None:
    assert moved_replicas((1, 2, 0), 0) == [0, 1, 2]
    assert moved_replicas((1, 2, 0), 1) == [1, 2, 0]


def test_a_moved_leaders_read_of_the_state_is_found_in_its_log_past_the_mark(tmp_path: Path) -> None:
    """The fault stalls a moved share-partition only once its new leader read the state: stalled sooner, that read
    is what freezes and the leader serves nothing."""
    line = "[2026-11-30 04:24:28,219] INFO Share-partition chaos-share-group of chaos-share-{} read at start " \
           "offset 45 (state epoch 3, leader epoch {}) (pybroker.share)\n"
    log = tmp_path / "broker.log"
    log.write_text(line.format(0, 1))
    mark = log.stat().st_size
    assert not state_read_since(log, mark, 0)
    with open(log, "a") as f:
        f.write(line.format(1, 2) + line.replace("chaos-share-group", "other").format(0, 2))
    assert not state_read_since(log, mark, 0) and state_read_since(log, mark, 1)
    with open(log, "a") as f:
        f.write(line.format(0, 3))
    assert state_read_since(log, mark, 0)


def skipped_round(seed: int, caught: bool = False) -> RoundResult:
    report = Report()
    if caught:
        report.anomalies.update(share_count_back=[{"offset": 0}])
    events = [{"t": 3.0, "type": "fault-skipped", "id": 0, "kind": "share-stall-then-kill", "reason": "why"}]
    return RoundResult(seed, [], "clean" if not caught else "anomalies", report, skipped=skipped_faults(events))


def test_a_skipped_fault_is_in_the_rounds_outcome_and_table() -> None:
    result = skipped_round(11)
    assert result.skipped == ["share-stall-then-kill: why"]
    assert "1 fault(s) SKIPPED, not exercised: share-stall-then-kill: why" in result.outcome
    assert "SKIPPED" in table([result])
    assert RoundResult(12, [], "clean", Report()).outcome == "clean"


def test_the_mutant_runner_counts_a_round_that_skipped_its_fault_as_not_exercised(monkeypatch, capsys) -> None:
    first, second, third = BY_NAME["released-before-written"].seeds()
    outcomes = {seed: skipped_round(seed) for seed in (first, second, third)}

    @contextmanager
    def planted(_mutant: object) -> Iterator[Path]:
        yield Path("/nonexistent")

    monkeypatch.setattr(mutants_main, "planted", planted)
    monkeypatch.setattr(mutants_main, "bounded_round", lambda seed, *_a, **_k: outcomes[seed])
    assert mutants_main.main(["--only", "released-before-written"]) == 1
    out = capsys.readouterr().out
    assert "| not exercised | 0 of 3, 3 not exercised |" in out and "NOT CAUGHT: released-before-written" in out
    outcomes[second] = skipped_round(second, caught=True)
    assert mutants_main.main(["--only", "released-before-written"]) == 0
    assert f"| 2 (seed {second}) | 1 of 2, 1 not exercised |" in capsys.readouterr().out
