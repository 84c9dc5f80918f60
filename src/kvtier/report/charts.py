"""Inline SVG charts, drawn in Python: no script, no network, prints as vectors.

Each function returns one `<svg>` string with a `class="chart"` root, a `<title>` for screen
readers and a `<title>` tooltip on every mark. Marks carry `class="mark"` so a browser check can
count them and measure that they laid out with a non-zero size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

# Colour-blind-safe categorical palette (Okabe-Ito), darkest first for small print.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")
HATCHED = "url(#hatch)"  # HATCH_DEF's pattern, a paint like a colour: memory left free
LEGEND_CHAR_PX = 7.2  # a 12 px sans-serif character is at most this wide, on average, in legends

Fmt = Callable[[float], str]


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of a stacked bar: a label, its size, and its fill (a colour, or HATCHED)."""

    label: str
    value: float
    colour: str

    @property
    def hatched(self) -> bool:
        return self.colour == HATCHED


@dataclass(frozen=True, slots=True)
class Series:
    """One line of a line chart; `dashed` marks a quantity of a different nature than the rest."""

    name: str
    points: tuple[tuple[float, float], ...]
    colour: str
    dashed: bool = False


@dataclass(frozen=True, slots=True)
class Bracket:
    """A labelled span drawn under a stacked bar, from `start` to `end` in value units."""

    label: str
    start: float
    end: float


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] with about `count` steps of 1, 2 or 5 x 10^k."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [k * step for k in range(math.floor(low / step), math.ceil(high / step) + 1)]


def pow2_ticks(low: float, high: float, count: int = 7) -> list[float]:
    """Powers of two covering [low, high] (low >= 1), thinned to at most about `count`."""
    first, last = math.floor(math.log2(low)), max(math.ceil(math.log2(high)), 1)
    stride = max(1, math.ceil((last - first) / count))
    last = first + stride * math.ceil((last - first) / stride)
    return [float(2**k) for k in range(first, last + 1, stride)]


def _svg_open(width: int, height: int, title: str) -> list[str]:
    return [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img">',
        f"<title>{escape(title)}</title>",
    ]


def _legend_places(labels: Sequence[str], width: float) -> list[tuple[float, int]]:
    """(x offset, row) of each legend entry, wrapped to `width`."""
    places, cx, row = [], 0.0, 0
    for label in labels:
        span = 22 + LEGEND_CHAR_PX * len(label) + 14
        if cx + span > width and cx > 0:
            cx, row = 0.0, row + 1
        places.append((cx, row))
        cx += span
    return places


def _legend_rows(labels: Sequence[str], width: float) -> int:
    return 1 + max((row for _, row in _legend_places(labels, width)), default=0)


def _legend(items: Sequence[tuple[str, str, bool]], x: float, y: float, width: float) -> str:
    """Legend rows wrapped to `width`: (label, colour, dashed line), a swatch unless dashed."""
    out = ['<g class="legend">']
    places = _legend_places([item[0] for item in items], width)
    for (label, colour, dashed), (dx, row) in zip(items, places, strict=True):
        cx, cy = x + dx, y + 18 * row
        if dashed:
            out.append(
                f'<line x1="{cx:.1f}" y1="{cy - 4:.1f}" x2="{cx + 16:.1f}" y2="{cy - 4:.1f}" '
                f'stroke="{colour}" stroke-width="2.5" stroke-dasharray="5 3"/>'
            )
        else:
            out.append(
                f'<rect x="{cx:.1f}" y="{cy - 10:.1f}" width="16" height="11" fill="{colour}" '
                f'stroke="#555" stroke-width="0.5"/>'
            )
        out.append(f'<text x="{cx + 22:.1f}" y="{cy:.1f}">{escape(label)}</text>')
    out.append("</g>")
    return "".join(out)


HATCH_DEF = (
    '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#2a9d3a" stroke-width="2"/></pattern></defs>'
)


def _y_grid(
    ticks: Sequence[float], fy: Callable[[float], float], left: float, plot_w: float, fmt: Fmt
) -> list[str]:
    """A horizontal grid line and its label at each y tick."""
    return [
        f'<line x1="{left}" x2="{left + plot_w}" y1="{fy(t):.2f}" y2="{fy(t):.2f}" '
        f'class="grid"/><text x="{left - 6}" y="{fy(t) + 4:.2f}" text-anchor="end">'
        f"{escape(fmt(t))}</text>"
        for t in ticks
    ]


def _axis_labels(
    x_label: str, y_label: str, left: float, top: float, plot_w: float, plot_h: float
) -> str:
    """The x baseline, both axis titles, and the close of the `axes` group."""
    return (
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" '
        f'stroke="#333"/><text x="{left + plot_w / 2}" y="{top + plot_h + 36}" '
        f'text-anchor="middle" class="axis-label">{escape(x_label)}</text>'
        f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle" '
        f'class="axis-label">{escape(y_label)}</text></g>'
    )


def stacked_bar(
    segments: Sequence[Segment],
    *,
    title: str,
    unit: str,
    brackets: Sequence[Bracket] = (),
    width: int = 760,
) -> str:
    """One horizontal bar split into `segments` (in order), with labelled `brackets` below."""
    total = sum(s.value for s in segments)
    if total <= 0 or any(s.value < 0 for s in segments):
        raise ValueError("a stacked bar needs non-negative parts and a positive total")
    left, right, bar_y, bar_h = 10, 10, 28, 46
    scale = (width - left - right) / total
    legend_rows = _legend_rows([f"{s.label} {s.value:.2f}" for s in segments], width - 20)
    height = int(bar_y + bar_h + 34 * len(brackets) + 30 + 18 * legend_rows)
    out = _svg_open(width, height, title)
    out.append(HATCH_DEF)
    out.append(
        f'<text x="{left}" y="18" class="axis-label">0</text>'
        f'<text x="{width - right}" y="18" class="axis-label" text-anchor="end">'
        f"{_num(total)} {escape(unit)}</text>"
    )
    x = float(left)
    for seg in segments:
        w = seg.value * scale
        tip = f"{seg.label}: {seg.value:.2f} {unit}"
        out.append(
            f'<rect class="mark" x="{x:.2f}" y="{bar_y}" width="{w:.2f}" height="{bar_h}" '
            f'fill="{seg.colour}" stroke="#333" stroke-width="0.6">'
            f"<title>{escape(tip)}</title></rect>"
        )
        if w > 7.2 * len(_num(seg.value)) + 8:
            colour = "#000" if seg.hatched or seg.colour == "#F0E442" else "#fff"
            out.append(
                f'<text x="{x + w / 2:.2f}" y="{bar_y + bar_h / 2 + 4}" text-anchor="middle" '
                f'fill="{colour}" class="bar-value">{_num(seg.value)}</text>'
            )
        x += w
    y = bar_y + bar_h + 14
    for br in brackets:
        x0, x1 = left + br.start * scale, left + br.end * scale
        out.append(
            f'<path class="bracket" d="M{x0:.2f},{y} v8 H{x1:.2f} v-8" fill="none" '
            f'stroke="#222" stroke-width="1.2"/>'
        )
        anchor, tx = ("end", x1) if x1 > width * 0.6 else ("start", x0)
        out.append(
            f'<text x="{tx:.2f}" y="{y + 22}" text-anchor="{anchor}">{escape(br.label)}</text>'
        )
        y += 34
    items = [(f"{s.label} {s.value:.2f}", s.colour, False) for s in segments]
    out.append(_legend(items, left, y + 16, width - 20))
    out.append("</svg>")
    return "".join(out)


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_log2: bool = False,
    y_log2: bool = False,
    x_fmt: Fmt = _num,
    y_fmt: Fmt = _num,
    width: int = 760,
    height: int = 340,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """Lines over a shared x axis; `x_log2` / `y_log2` space an axis by powers of two.

    On a log y axis, points below 1 cannot be drawn and are left off their line. The x axis is
    ticked at every point's x unless `x_ticks` names fewer (a long timeline).
    """
    if y_log2:
        series = [
            Series(s.name, tuple(p for p in s.points if p[1] >= 1), s.colour, s.dashed)
            for s in series
        ]
    points = [p for s in series for p in s.points]
    if not points:
        raise ValueError("a line chart needs at least one point")
    xs = sorted({p[0] for p in points})
    ys = [p[1] for p in points]
    y_ticks = pow2_ticks(min(ys), max(ys)) if y_log2 else nice_ticks(0.0, max(ys))
    pad_l, pad_r, pad_t = 64, 18, 14
    legend_rows = _legend_rows([s.name for s in series], width - pad_l - pad_r)
    pad_b = 48 + 18 * legend_rows
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b

    def fx(value: float) -> float:
        lo, hi = (math.log2(xs[0]), math.log2(xs[-1])) if x_log2 else (xs[0], xs[-1])
        v = math.log2(value) if x_log2 else value
        return pad_l + (0.5 if hi == lo else (v - lo) / (hi - lo)) * plot_w

    def fy(value: float) -> float:
        lo, hi = y_ticks[0], y_ticks[-1]
        if y_log2:
            lo, hi, value = math.log2(lo), math.log2(hi), math.log2(value)
        return pad_t + plot_h - (value - lo) / (hi - lo) * plot_h

    out = _svg_open(width, height, title)
    out.append('<g class="axes">')
    out.extend(_y_grid(y_ticks, fy, pad_l, plot_w, y_fmt))
    for t in xs if x_ticks is None else x_ticks:
        out.append(
            f'<line x1="{fx(t):.2f}" x2="{fx(t):.2f}" y1="{pad_t + plot_h}" '
            f'y2="{pad_t + plot_h + 4}" stroke="#333"/><text x="{fx(t):.2f}" '
            f'y="{pad_t + plot_h + 18}" text-anchor="middle">{escape(x_fmt(t))}</text>'
        )
    out.append(_axis_labels(x_label, y_label, pad_l, pad_t, plot_w, plot_h))
    for s in series:
        pts = sorted(s.points)
        path = " ".join(f"{fx(x):.2f},{fy(y):.2f}" for x, y in pts)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(
            f'<g class="series"><polyline points="{path}" fill="none" stroke="{s.colour}" '
            f'stroke-width="2.2"{dash}/>'
        )
        for x, y in pts:
            tip = f"{s.name}: {y_fmt(y)} at {x_fmt(x)}"
            out.append(
                f'<circle class="mark" cx="{fx(x):.2f}" cy="{fy(y):.2f}" r="3.2" '
                f'fill="{s.colour}"><title>{escape(tip)}</title></circle>'
            )
        out.append("</g>")
    items = [(s.name, s.colour, s.dashed) for s in series]
    out.append(_legend(items, pad_l, height - 18 * legend_rows + 6, plot_w))
    out.append("</svg>")
    return "".join(out)


def stacked_columns(
    categories: Sequence[str],
    stacks: Sequence[tuple[str, Sequence[float], str]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_fmt: Fmt = _num,
    width: int = 760,
    height: int = 320,
) -> str:
    """One column per category, each split into `stacks` (name, value per category, colour)."""
    if not categories or any(len(values) != len(categories) for _, values, _ in stacks):
        raise ValueError("every stack needs one value per category")
    totals = [sum(values[i] for _, values, _ in stacks) for i in range(len(categories))]
    y_ticks = nice_ticks(0.0, max(max(totals), 1e-9))
    pad_l, pad_r, pad_t, pad_b = 64, 18, 14, 66
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    slot = plot_w / len(categories)
    bar_w = min(64.0, slot * 0.6)

    def fy(value: float) -> float:
        return pad_t + plot_h - value / y_ticks[-1] * plot_h

    out = _svg_open(width, height, title)
    out.append('<g class="axes">')
    out.extend(_y_grid(y_ticks, fy, pad_l, plot_w, y_fmt))
    out.append(_axis_labels(x_label, y_label, pad_l, pad_t, plot_w, plot_h))
    for i, category in enumerate(categories):
        cx = pad_l + slot * (i + 0.5)
        base = 0.0
        for name, values, colour in stacks:
            v = values[i]
            top = fy(base + v)
            tip = f"{name} at {category}: {y_fmt(v)}"
            out.append(
                f'<rect class="mark" x="{cx - bar_w / 2:.2f}" y="{top:.2f}" width="{bar_w:.2f}" '
                f'height="{fy(base) - top:.2f}" fill="{colour}" stroke="#333" stroke-width="0.5">'
                f"<title>{escape(tip)}</title></rect>"
            )
            base += v
        out.append(
            f'<text x="{cx:.2f}" y="{pad_t + plot_h + 18}" text-anchor="middle">'
            f"{escape(category)}</text>"
        )
    items = [(name, colour, False) for name, _, colour in stacks]
    out.append(_legend(items, pad_l, height - 8, plot_w))
    out.append("</svg>")
    return "".join(out)
