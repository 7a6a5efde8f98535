"""The performance targets of the compiled-build issue (36), judged from one run's report.

`make bench` prints them under the table, one line per measured row a target covers, so that a run says
by itself which targets it met. A ratio target compares pybroker's median with Tansu's from the same run;
an absolute one holds pybroker's median to the figure measured when the issue was filed. Rows a run did not
measure are left out; a target none of whose rows was measured says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from benchmarks.report import LIMIT, Report, Row, fmt


@dataclass(frozen=True)
class Target:
    what: str
    code: str
    metric: str
    """A regular expression the metric's name must match (re.search)."""
    bound: float
    against_tansu: bool = True
    """The bound holds the pybroker/Tansu ratio; otherwise pybroker's own median, in the metric's unit."""

    def covers(self, row: Row) -> bool:
        return row.metric.code == self.code and re.search(self.metric, row.metric.name) is not None

    def met(self, row: Row, value: float) -> bool:
        return value >= self.bound if row.metric.higher_is_better else value <= self.bound


TARGETS = (
    Target("W12 broker CPU per one-message Produce ≤ 0.5× Tansu's", "W12", r"^Produce.*: broker CPU per request$",
           0.5),
    Target("W12 broker CPU per empty Fetch ≤ 0.5× Tansu's", "W12", r"^empty Fetch.*: broker CPU per request$", 0.5),
    Target("W1 produce ≥ 1.0× Tansu in every configuration", "W1", r"^(none|lz4), \d+ partitions?$", 1.0),
    Target("W1 broker CPU per message, full validation, ≤ Tansu's", "W1", r": broker CPU per message$", 1.0),
    Target("W2 consume ≥ 1.0× Tansu in every configuration, equal response sizes", "W2",
           r", responses ≤ 1 MiB: steady$", 1.0),
    Target("W2 the same, read raw (the broker alone, no client decoding)", "W2", r"raw Fetch .*: served$", 1.0),
    Target("W4 acks=all round trip p99 ≤ Tansu's", "W4", r", p99$", 1.0),
    Target("W10 start-up to a first acks=all produce no worse than when filed (0.80 s)", "W10",
           r"first acks=all produce", 0.80, against_tansu=False),
    Target("W10 idle RSS not above when filed (43.5 MiB)", "W10", r"^RSS of the idle broker", 43.5,
           against_tansu=False),
)

NO_KAFKA = ("W12 ≤ 0.5× a warmed Apache Kafka's: not measured, no Apache Kafka broker can run here (only its "
            "client jars are in ../shared, and there is no network to fetch one)")


def judge(report: Report) -> list[dict[str, Any]]:
    """One entry per (target, measured row): the value judged, and whether it meets the target."""
    judged = []
    for target in TARGETS:
        for row in report.rows.values():
            if not target.covers(row):
                continue
            if target.against_tansu:
                value = report.ratios(row)["pybroker/tansu"]
            else:
                value = report.summary(row, "pybroker").get("median")
            if value is not None:
                judged.append({"target": target.what, "metric": row.metric.name, "unit": row.metric.unit,
                               "against_tansu": target.against_tansu, "value": value,
                               "met": target.met(row, value)})
    return judged


def table(report: Report) -> str:
    """The targets under the results table, with the W12 floor beside them."""
    judged = judge(report)
    lines = [["target", "row", "measured", "met"]]
    for entry in judged:
        measured = f"{entry['value']:.2f}× Tansu" if entry["against_tansu"] else f"{fmt(entry['value'])} {entry['unit']}"
        lines.append([entry["target"], entry["metric"], measured, "yes" if entry["met"] else "no"])
    for target in TARGETS:
        if not any(entry["target"] == target.what for entry in judged):
            lines.append([target.what, "", "not measured in this run", ""])
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    text = ["Targets (issue 36):"]
    text += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines]
    for row in report.rows.values():
        if row.metric.code == LIMIT and row.metric.name.endswith("server CPU per request"):
            floor = report.summary(row, LIMIT).get("median")
            if floor is not None:
                text.append(f"W12 floor, {row.metric.name}: {fmt(floor)} {row.metric.unit}")
    text.append(NO_KAFKA)
    met = sum(entry["met"] for entry in judged)
    text.append(f"{met} of {len(judged)} measured rows meet their target")
    return "\n".join(text)
