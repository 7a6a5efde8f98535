"""Samples per metric and side, summarised as median with min–max; the printed table and the JSON file."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

SIDES = ("pybroker", "tansu")
LIMIT = "LIMIT"


@dataclass(frozen=True)
class Metric:
    """One table row: `workload` starts with its code (W1…W7, LIMIT)."""

    workload: str
    name: str
    unit: str
    higher_is_better: bool

    @property
    def code(self) -> str:
        return self.workload.split()[0]


@dataclass
class Row:
    metric: Metric
    samples: dict[str, list[float]] = field(default_factory=dict)
    na: dict[str, str] = field(default_factory=dict)


def fmt(value: float) -> str:
    """Thousands separators for large numbers, about three significant digits for small ones."""
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    return f"{value:.0f}" if size >= 100 else f"{value:.1f}" if size >= 10 else f"{value:.2f}" if size >= 0.1 \
        else f"{value:.3f}"


class Report:
    """Everything measured in one run, in the order it was first recorded."""

    def __init__(self) -> None:
        self.rows: dict[Metric, Row] = {}
        self.failures: dict[tuple[str, str], str] = {}
        self.notes: list[str] = []

    def _row(self, metric: Metric) -> Row:
        return self.rows.setdefault(metric, Row(metric))

    def add(self, metric: Metric, side: str, value: float) -> None:
        self._row(metric).samples.setdefault(side, []).append(value)

    def na(self, metric: Metric, side: str, reason: str) -> None:
        self._row(metric).na.setdefault(side, reason)

    def fail(self, code: str, side: str, reason: str) -> None:
        """A whole workload could not run on `side` (e.g. the broker did not start)."""
        self.failures.setdefault((code, side), reason)

    def summary(self, row: Row, side: str) -> dict[str, Any]:
        samples = row.samples.get(side)
        if samples:
            return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
                    "samples": samples}
        reason = row.na.get(side) or self.failures.get((row.metric.code, side), "not measured")
        return {"na": reason}

    def _median(self, row: Row, side: str) -> float | None:
        return self.summary(row, side).get("median")

    def limit_msgs(self) -> float | None:
        """The machine limit in 100-byte-message equivalents per second, if measured."""
        for row in self.rows.values():
            if row.metric.code == LIMIT and row.metric.unit == "msgs/s":
                return self._median(row, LIMIT)
        return None

    def ratios(self, row: Row) -> dict[str, float | None]:
        """pybroker/tansu, and for W1 each broker's share of the machine limit."""
        ours, peer, limit = self._median(row, "pybroker"), self._median(row, "tansu"), self.limit_msgs()
        out: dict[str, float | None] = {"pybroker/tansu": ours / peer if ours is not None and peer else None}
        if row.metric.code == "W1" and limit:
            out["pybroker/limit"] = ours / limit if ours is not None else None
            out["tansu/limit"] = peer / limit if peer is not None else None
        return out

    def _cell(self, row: Row, side: str) -> str:
        s = self.summary(row, side)
        if "na" in s:
            return f"n/a ({s['na'][:60]})"
        if len(s["samples"]) == 1:
            return fmt(s["median"])
        return f"{fmt(s['median'])} [{fmt(s['min'])}–{fmt(s['max'])}]"

    def table(self) -> str:
        header = ["workload", "metric", "unit", "better", "pybroker", "tansu", "pybroker/tansu",
                  "pybroker/limit", "tansu/limit"]
        lines = [header]
        for row in self.rows.values():
            if row.metric.code == LIMIT:
                continue
            ratios = self.ratios(row)
            lines.append([row.metric.workload, row.metric.name, row.metric.unit,
                          "higher" if row.metric.higher_is_better else "lower",
                          self._cell(row, "pybroker"), self._cell(row, "tansu")]
                         + [f"{ratios[k]:.2f}" if ratios.get(k) is not None else "" for k in header[6:]])
        for (code, side), reason in self.failures.items():
            if not any(row.metric.code == code for row in self.rows.values()):
                lines.append([code, "(whole workload)", "", "", reason[:60] if side == "pybroker" else "",
                              reason[:60] if side == "tansu" else "", "", "", ""])
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
        text.insert(1, "  ".join("-" * w for w in widths))
        for row in self.rows.values():
            if row.metric.code == LIMIT:
                text.append(f"Machine limit, {row.metric.name}: {self._cell(row, LIMIT)} {row.metric.unit}")
        return "\n".join(text + [f"Note: {note}" for note in self.notes])

    def to_json(self, meta: dict[str, Any]) -> dict[str, Any]:
        rows = []
        for row in self.rows.values():
            limit = row.metric.code == LIMIT
            rows.append({"workload": row.metric.workload, "metric": row.metric.name, "unit": row.metric.unit,
                         "better": "higher" if row.metric.higher_is_better else "lower",
                         **{side: self.summary(row, side) for side in ((LIMIT,) if limit else SIDES)},
                         "ratios": {} if limit else self.ratios(row)})
        failures = [{"workload": code, "side": side, "reason": reason}
                    for (code, side), reason in self.failures.items()]
        return {**meta, "rows": rows, "failures": failures, "notes": self.notes}
