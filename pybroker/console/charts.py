"""The charts page's line charts as inline SVG, drawn here: no chart library to install or to serve.

Each chart is one ``<svg>`` with a line per series over the sampled times, a y axis from zero to the largest
value, time labels at both ends and the middle, and a legend; the page scales it to its width (viewBox).
"""

from __future__ import annotations

import time
from html import escape

WIDTH, PLOT_HEIGHT = 900, 190
LEFT, RIGHT, TOP = 60, 20, 40  # room for the y labels and the title
LEGEND_COLUMNS, LINE = 4, 16
#: Tableau's ten colours, a palette that stays apart for the colour-blind.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")


def line_chart(title: str, times: list[float], series: dict[str, list[float]]) -> str:
    """An SVG line chart of ``series`` (name -> one value per time in ``times``, epoch seconds)."""
    drawn = {name: values for name, values in series.items() if len(values) == len(times)}
    plot_w, plot_h = WIDTH - LEFT - RIGHT, PLOT_HEIGHT
    bottom = TOP + plot_h
    height = bottom + 2 * LINE + LINE * -(-len(drawn) // LEGEND_COLUMNS) + LINE // 2  # time labels, legend rows
    parts = [f'<svg class="line-chart" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}" '
             f'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12">',
             f'<text x="{LEFT}" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
             f'<path d="M{LEFT},{TOP} V{bottom} H{LEFT + plot_w}" stroke="#888" fill="none"/>']
    if len(times) < 2 or not drawn:
        parts.append(f'<text class="empty" x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle" '
                     'fill="#666">Not enough samples yet</text></svg>')
        return "".join(parts)
    top_value = max((max(values) for values in drawn.values()), default=0.0) or 1.0
    start, span = times[0], (times[-1] - times[0]) or 1.0

    def x(at: float) -> float:
        return LEFT + (at - start) / span * plot_w

    def y(value: float) -> float:
        return bottom - value / top_value * plot_h

    for fraction in (0.0, 0.5, 1.0):
        value = top_value * fraction
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                     'stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{_number(value)}</text>')
    for at, anchor in ((times[0], "start"), (start + span / 2, "middle"), (times[-1], "end")):
        parts.append(f'<text x="{x(at):.1f}" y="{bottom + LINE}" text-anchor="{anchor}">'
                     f'{time.strftime("%H:%M:%S", time.localtime(at))}</text>')
    for index, (name, values) in enumerate(drawn.items()):
        colour = PALETTE[index % len(PALETTE)]
        points = " ".join(f"{x(at):.1f},{y(value):.1f}" for at, value in zip(times, values))
        parts.append(f'<polyline data-series="{escape(name)}" points="{points}" fill="none" stroke="{colour}" '
                     'stroke-width="2"/>')
        column, row = index % LEGEND_COLUMNS, index // LEGEND_COLUMNS
        legend_x, legend_y = LEFT + column * (plot_w / LEGEND_COLUMNS), bottom + 2 * LINE + row * LINE
        parts.append(f'<rect x="{legend_x:.1f}" y="{legend_y - 9}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{legend_x + 14:.1f}" y="{legend_y}">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _number(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.2f}"
