"""A fleet run in the simulation section: each replica's load over time.

Reads the `replicas` of `kvtier simulate --replicas N --json`: each replica's (time, running,
waiting) samples. The first `MAX_LINES` replicas are drawn, one line each (running plus waiting
requests); the table of the section lists every run's imbalance.
"""

from __future__ import annotations

from kvtier.report.charts import PALETTE, Series, line_chart, nice_ticks
from kvtier.report.html_parts import figure
from kvtier.sim.fleet.payload import FleetPart

MAX_LINES = 16  # more lines than this read as a smear


def replica_load_figure(run: FleetPart) -> str:
    """The figure, or '' when no replica has a series."""
    replicas = run.replicas
    if not replicas or not any(r.series for r in replicas):
        return ""
    series = [
        Series(
            f"replica {i}",
            tuple((float(t), float(running + waiting)) for t, running, waiting in r.series),
            PALETTE[i % len(PALETTE)],
            dashed=i >= len(PALETTE),
        )
        for i, r in enumerate(replicas[:MAX_LINES])
        if r.series
    ]
    times = [p[0] for s in series for p in s.points]
    title = "Load per replica over time"
    svg = line_chart(
        series,
        title=title,
        x_label="time (s)",
        y_label="requests running + waiting",
        x_fmt=lambda v: f"{v:,.0f}",
        y_fmt=lambda v: f"{v:g}",
        x_ticks=nice_ticks(min(times), max(times)),
    )
    shown = f"the first {MAX_LINES} of {len(replicas)}" if len(replicas) > MAX_LINES else "each"
    caption = (
        f"Requests on {shown} replica(s) as the router spread them; "
        f"imbalance (max / mean requests) {run.imbalance:.3f}."
    )
    return figure(title, svg, caption)
