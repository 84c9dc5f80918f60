"""A scatter of labelled points against a reference point, drawn as inline SVG like charts.py:
each point a `class="mark"` with a `<title>` tooltip; the reference a square with dashed lines
through it, so what lies left of and above it is better on both axes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from kvtier.report.charts import PALETTE, Fmt, _axis_labels, _legend, _svg_open, _y_grid, nice_ticks


@dataclass(frozen=True, slots=True)
class Dot:
    """One point of a scatter chart."""

    label: str  # drawn beside the point (a rank)
    tip: str  # the tooltip
    x: float
    y: float
    strong: bool  # drawn in colour; the rest grey


def scatter(
    points: Sequence[Dot],
    reference: Dot,
    *,
    title: str,
    x_label: str,
    y_label: str,
    legend: tuple[str, str, str],  # the reference's, the strong points', the others'
    x_fmt: Fmt,
    y_fmt: Fmt,
    width: int = 760,
    height: int = 380,
) -> str:
    every = [*points, reference]
    x_ticks = nice_ticks(0.0, max(p.x for p in every) * 1.05)
    y_ticks = nice_ticks(0.0, max(p.y for p in every) * 1.05)
    pad_l, pad_r, pad_t, pad_b = 70, 18, 14, 66
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b

    def fx(v: float) -> float:
        return pad_l + (v - x_ticks[0]) / (x_ticks[-1] - x_ticks[0]) * plot_w

    def fy(v: float) -> float:
        return pad_t + plot_h - (v - y_ticks[0]) / (y_ticks[-1] - y_ticks[0]) * plot_h

    out = _svg_open(width, height, title)
    out.append('<g class="axes">')
    out.extend(_y_grid(y_ticks, fy, pad_l, plot_w, y_fmt))
    for t in x_ticks:
        out.append(
            f'<line x1="{fx(t):.2f}" x2="{fx(t):.2f}" y1="{pad_t + plot_h}" '
            f'y2="{pad_t + plot_h + 4}" stroke="#333"/><text x="{fx(t):.2f}" '
            f'y="{pad_t + plot_h + 18}" text-anchor="middle">{escape(x_fmt(t))}</text>'
        )
    out.append(_axis_labels(x_label, y_label, pad_l, pad_t, plot_w, plot_h))
    rx, ry = fx(reference.x), fy(reference.y)
    out.append(
        f'<line x1="{rx:.2f}" x2="{rx:.2f}" y1="{pad_t}" y2="{pad_t + plot_h}" stroke="#555" '
        f'stroke-dasharray="5 4"/><line x1="{pad_l}" x2="{pad_l + plot_w}" y1="{ry:.2f}" '
        f'y2="{ry:.2f}" stroke="#555" stroke-dasharray="5 4"/>'
    )
    for p in points:
        colour = PALETTE[0] if p.strong else PALETTE[7]
        out.append(
            f'<g class="point"><circle class="mark" cx="{fx(p.x):.2f}" cy="{fy(p.y):.2f}" '
            f'r="4.5" fill="{colour}"><title>{escape(p.tip)}</title></circle>'
            f'<text x="{fx(p.x) + 6:.2f}" y="{fy(p.y) - 5:.2f}">{escape(p.label)}</text></g>'
        )
    out.append(
        f'<rect class="mark" x="{rx - 5:.2f}" y="{ry - 5:.2f}" width="10" height="10" '
        f'fill="#1b1f24"><title>{escape(reference.tip)}</title></rect>'
    )
    items = [(legend[0], "#1b1f24", False), (legend[1], PALETTE[0], False),
             (legend[2], PALETTE[7], False)]  # fmt: skip
    out.append(_legend(items, pad_l, height - 12, plot_w))
    out.append("</svg>")
    return "".join(out)
