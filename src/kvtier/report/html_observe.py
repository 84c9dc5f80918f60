"""The serving section: `kvtier observe --json` drawn as its diagnosis and four time series.

The x axis counts samples in log (or scrape) order: a timeline point that merges several samples
sits at its first one, so a day-long log and a minute-long one read the same way. Each point is
what observe printed: peaks for KV usage and queues, means for throughput, the hit rate as
observe weighs it.
"""

from __future__ import annotations

from html import escape

from kvtier.observe.timeline import Point
from kvtier.report.charts import PALETTE, Series, line_chart, nice_ticks
from kvtier.report.html_parts import Section, figure, table
from kvtier.report.observe_payload import ObservePayload

_MAX_TICKS = 10


def _percent(v: float) -> str:
    return f"{v:.0f}%"


def _count(v: float) -> str:
    return f"{v:,.0f}"


def _positions(timeline: list[Point]) -> list[float]:
    """Each point's first sample number, 1-based: the running sum of the samples before it."""
    out, seen = [], 0
    for p in timeline:
        out.append(float(seen + 1))
        seen += p.samples or 1
    return out


def _series(
    name: str, key: str, xs: list[float], timeline: list[Point], colour: str, scale: float = 1
) -> Series:
    values = [(x, getattr(p, key)) for x, p in zip(xs, timeline, strict=True)]
    pts = tuple((x, scale * float(v)) for x, v in values if v is not None)
    return Series(name, pts, colour)


# (title, y label, y format, caption, series: (name, key, scale))
_CHARTS = (
    (
        "KV cache usage",
        "KV pool used (%)",
        _percent,
        "Peak share of the KV pool in use over each point's samples (`token usage` / "
        "`GPU KV cache usage`); the dashed level is observe's 'full' threshold.",
        (("KV usage", "kv_usage", 100.0),),
    ),
    (
        "Requests running and queued",
        "requests",
        _count,
        "Peak running and queued requests over each point's samples (`#running-req`, "
        "`#queue-req` / `Running`, `Waiting`).",
        (("running", "running", 1.0), ("queued", "queued", 1.0)),
    ),
    (
        "Throughput",
        "tokens/s",
        _count,
        "Mean prompt and generation throughput over each point's samples, as the engine printed.",
        (("prompt", "prompt_tps", 1.0), ("generation", "gen_tps", 1.0)),
    ),
    (
        "Prefix cache hit rate",
        "prompt tokens hit (%)",
        _percent,
        "Cached / (cached + new) prefill tokens where the lines give both, else the engine's "
        "printed rate.",
        (("hit rate", "hit_rate", 100.0),),
    ),
)


def _x_ticks(xs: list[float]) -> list[float] | None:
    if len(xs) <= _MAX_TICKS:
        return None
    return [t for t in nice_ticks(xs[0], xs[-1], 6) if xs[0] <= t <= xs[-1]] or [xs[0]]


def observe_section(payload: ObservePayload) -> Section:
    """Diagnosis, headline figures and the time-series charts that have any points."""
    timeline = list(payload.timeline)
    verdict = payload.diagnosis
    facts = [
        ("source", payload.source),
        ("engine", payload.engine or "unknown"),
        ("samples", f"{payload.samples:,}"),
        ("diagnosis", verdict),
        ("why", payload.reason),
    ]
    if payload.kv_usage_max is not None:
        facts.append(("peak KV usage", f"{100 * payload.kv_usage_max:.1f}%"))
    if payload.queue_max is not None:
        facts.append(("most queued", f"{payload.queue_max:,}"))
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    body = [f'<dl class="facts">{items}</dl>']
    xs = _positions(timeline)
    threshold = payload.kv_full_threshold
    for title, y_label, fmt, caption, wanted in _CHARTS:
        series = [
            _series(name, key, xs, timeline, PALETTE[i], scale)
            for i, (name, key, scale) in enumerate(wanted)
        ]
        series = [s for s in series if s.points]
        if not series:
            body.append(f'<p class="unit-note">{escape(title)}: the source gave no figures.</p>')
            continue
        if title == "KV cache usage" and threshold is not None and len(xs) > 1:
            level = 100 * threshold
            full = ((xs[0], level), (xs[-1], level))
            series.append(Series(f"full ({level:.0f}%)", full, PALETTE[5], dashed=True))
        svg = line_chart(
            series,
            title=title,
            x_label="sample (in log order)",
            y_label=y_label,
            x_fmt=_count,
            y_fmt=fmt,
            x_ticks=_x_ticks(xs),
        )
        body.append(figure(title, svg, caption))
    evidence = payload.evidence
    if evidence:
        rows = [[str(e.line or "metrics"), e.text] for e in evidence]
        body.append(table(["line", "what the server printed"], rows, "evidence"))
    steps = payload.next_steps
    if steps:
        body.append(
            '<ul class="notes">' + "".join(f"<li>{escape(s)}</li>" for s in steps) + "</ul>"
        )
    return Section("observe", f"Serving: {verdict}", "".join(body))
