"""benchmarks/targets.py judges a run's rows against issue 36's targets, in the right direction per metric."""

from __future__ import annotations

from benchmarks import targets
from benchmarks.report import LIMIT, Metric, Report

FETCH_CPU = Metric("W12 request cost", "empty Fetch (fetch.wait.max.ms=0), 8 clients: broker CPU per request", "µs",
                   False)
PRODUCE_LZ4 = Metric("W1 produce", "lz4, 1 partition", "msgs/s", True)
PRODUCE_NONE = Metric("W1 produce", "none, 8 partitions", "msgs/s", True)
RSS = Metric("W10 start-up", "RSS of the idle broker after that produce", "MiB", False)
FLOOR = Metric("LIMIT", "one empty Fetch answered with canned bytes by a bare uvloop server, 8 connections: server "
               "CPU per request", "µs", False)


def report_of(values: dict[Metric, dict[str, list[float]]]) -> Report:
    report = Report()
    for metric, sides in values.items():
        for side, samples in sides.items():
            for sample in samples:
                report.add(metric, side, sample)
    return report


def by_metric(report: Report) -> dict[str, tuple[float, bool]]:
    return {entry["metric"]: (round(entry["value"], 3), entry["met"]) for entry in targets.judge(report)}


def test_lower_is_better_rows_meet_a_ratio_at_or_under_the_bound():
    met = report_of({FETCH_CPU: {"pybroker": [20.0, 25.0, 30.0], "tansu": [50.0, 60.0, 70.0]}})
    missed = report_of({FETCH_CPU: {"pybroker": [40.0], "tansu": [60.0]}})
    assert by_metric(met) == {FETCH_CPU.name: (0.417, True)}
    assert by_metric(missed) == {FETCH_CPU.name: (0.667, False)}


def test_higher_is_better_rows_need_a_ratio_at_or_over_the_bound_each():
    report = report_of({PRODUCE_LZ4: {"pybroker": [0.94e6], "tansu": [1.0e6]},
                        PRODUCE_NONE: {"pybroker": [1.2e6], "tansu": [1.0e6]}})
    assert by_metric(report) == {PRODUCE_LZ4.name: (0.94, False), PRODUCE_NONE.name: (1.2, True)}


def test_an_absolute_target_holds_pybrokers_own_median():
    report = report_of({RSS: {"pybroker": [39.0, 44.0, 41.0], "tansu": [16.0]}})
    assert by_metric(report) == {RSS.name: (41.0, True)}
    assert by_metric(report_of({RSS: {"pybroker": [44.0]}})) == {RSS.name: (44.0, False)}


def test_a_row_with_no_peer_figure_is_not_judged_and_the_table_says_what_was_not_measured():
    report = report_of({FETCH_CPU: {"pybroker": [20.0]}, FLOOR: {LIMIT: [14.0]}})
    report.na(FETCH_CPU, "tansu", "Tansu is not installed here")
    assert targets.judge(report) == []
    text = targets.table(report)
    assert "W12 broker CPU per empty Fetch ≤ 0.5× Tansu's" in text and "not measured in this run" in text
    assert "server CPU per request: 14.0 µs" in text
    assert text.endswith("0 of 0 measured rows meet their target")
