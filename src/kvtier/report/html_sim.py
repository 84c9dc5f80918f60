"""The simulation section: hit rate per tier, TTFT and throughput against a swept parameter.

Reads `kvtier simulate`'s payload: one run, or a sweep whose runs each carry their parameter
value (`value`, or in a saved file `params[NAME]`). A run of a reference mode has no clock
(`timed` false, no `ttft_s`); its timing charts are left out.
"""

from __future__ import annotations

from html import escape

from kvtier.errors import KvtierError
from kvtier.report.charts import PALETTE, Series, line_chart, stacked_columns
from kvtier.report.html_fleet import replica_load_figure
from kvtier.report.html_parts import Section, figure, table, tokens
from kvtier.sim.metrics import SimResult
from kvtier.sim.payload import SimulatePayload
from kvtier.sim.sweep import SweepRun

TIER_COLOURS = {"device": PALETTE[0], "host": PALETTE[1], "store": PALETTE[2]}


def run_value(run: SweepRun, param: str) -> object:
    """The swept parameter's value in one run."""
    if run.value is not None:
        return run.value
    if run.run.params.get(param) is None:
        raise KvtierError(f"report: the simulate run params data has no '{param}'")
    return run.run.params[param]


def hit_rate_figure(param: str, labels: list[str], runs: list[SimResult]) -> str:
    tiers = list(runs[0].hit_rate_by_tier)
    stacks = [
        (
            tier,
            [100 * r.hit_rate_by_tier.get(tier, 0.0) for r in runs],
            TIER_COLOURS.get(tier, PALETTE[3 + i % 4]),
        )
        for i, tier in enumerate(tiers)
    ]
    title = "Prefix hit rate by tier"
    svg = stacked_columns(
        labels,
        stacks,
        title=title,
        x_label=param or "run",
        y_label="prompt tokens hit (%)",
        y_fmt=lambda v: f"{v:.0f}%",
    )
    caption = "Share of prompt tokens served from each tier's cache instead of prefill."
    return figure(title, svg, caption)


def timing_figures(param: str, labels: list[str], runs: list[SimResult]) -> str:
    """TTFT p50/p99 and throughput lines over the swept values.

    Numeric values (host ratio, fraction) are spaced by value; others (a KV dtype) evenly.
    """
    try:
        xs = [float(label) for label in labels]
    except ValueError:
        xs = [float(i) for i in range(len(labels))]
    x_fmt = dict(zip(xs, labels, strict=True)).__getitem__  # ticks sit on the swept values
    ttft = [
        Series(
            f"TTFT {q}",
            tuple((x, _ttft(r, q)) for x, r in zip(xs, runs, strict=True)),
            colour,
        )
        for q, colour in (("p50", PALETTE[0]), ("p99", PALETTE[5]))
    ]
    throughput = Series(
        "throughput",
        tuple((x, r.throughput_tok_s) for x, r in zip(xs, runs, strict=True)),
        PALETTE[2],
    )
    charts = (
        ("Time to first token", [*ttft], "seconds", lambda v: f"{v:g}",
         "Percentiles of time to first token over the measured requests."),
        ("Throughput", [throughput], "tokens per second", lambda v: f"{v:,.0f}",
         "Generated tokens per second over the whole trace."),
    )  # fmt: skip
    return "".join(
        figure(
            title,
            line_chart(series, title=title, x_label=param, y_label=unit, x_fmt=x_fmt, y_fmt=fmt),
            cap,
        )
        for title, series, unit, fmt, cap in charts
    )


def _ttft(run: SimResult, q: str) -> float:
    assert run.ttft_s is not None  # timing is drawn for timed runs only
    return float(getattr(run.ttft_s, q))


def timing_cells(run: SimResult) -> list[str]:
    ttft = run.ttft_s
    if not ttft:
        return ["untimed", "untimed", "untimed"]
    thr = run.throughput_tok_s
    return [f"{ttft.p50:.3f}", f"{ttft.p99:.3f}", f"{thr:,.0f}"]


def simulation_section(payload: SimulatePayload) -> Section:
    """Hit rate per tier, TTFT p50/p99 and throughput against the swept parameter."""
    param, swept = payload.runs()
    if not swept:
        what = "sweep has no runs" if payload.sweep is not None else "data holds no run"
        raise KvtierError(f"report: the simulate {what} to draw")
    labels = [str(run_value(r, param)) for r in swept] if param else ["run"]
    runs = [r.run for r in swept]
    body = hit_rate_figure(param, labels, runs)
    timed = all(r.ttft_s for r in runs)
    if param and len(runs) > 1 and timed:
        body += timing_figures(param, labels, runs)
    if not param and swept[0].fleet is not None:
        body += replica_load_figure(swept[0].fleet)
    rows = [
        [
            label,
            tokens(r.requests),
            f"{100 * r.hit_rate:.1f}%",
            *timing_cells(r),
        ]
        for label, r in zip(labels, runs, strict=True)
    ]
    headers = [param or "run", "requests", "hit rate", "TTFT p50 (s)", "TTFT p99 (s)",
               "throughput (tok/s)"]  # fmt: skip
    body += table(headers, rows, "runs")
    notes = "".join(f"<li>{escape(n)}</li>" for n in payload.notes or ())
    if notes:
        body += f'<ul class="notes">{notes}</ul>'
    return Section("simulate", "Workload simulation", body)
