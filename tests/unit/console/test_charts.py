"""The console's SVG line charts: one line per series through its points, labels, and no markup from names."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

from pybroker.console.charts import line_chart

SVG = "{http://www.w3.org/2000/svg}"


def test_a_line_per_series_scaled_to_the_largest_value() -> None:
    svg = ElementTree.fromstring(line_chart("Lag", [100.0, 110.0, 120.0], {"a": [0.0, 5.0, 10.0], "b": [1, 1, 1]}))
    lines = {line.get("data-series"): line.get("points") for line in svg.iter(f"{SVG}polyline")}
    assert set(lines) == {"a", "b"}
    xs_ys = [tuple(map(float, point.split(","))) for point in lines["a"].split()]
    assert [x for x, _ in xs_ys] == sorted(x for x, _ in xs_ys) and len(xs_ys) == 3
    assert xs_ys[2][1] < xs_ys[1][1] < xs_ys[0][1]  # higher values drawn higher
    texts = [text.text for text in svg.iter(f"{SVG}text")]
    assert "Lag" in texts and "10" in texts and "a" in texts and "b" in texts


def test_too_few_samples_say_so_and_names_are_escaped() -> None:
    assert "Not enough samples yet" in line_chart("t", [1.0], {"g": [1.0]})
    svg = line_chart("<b>", [1.0, 2.0], {"</svg><script>": [1.0, 2.0]})
    ElementTree.fromstring(svg)  # still well-formed
    assert "<script>" not in svg and "&lt;/svg&gt;&lt;script&gt;" in svg
