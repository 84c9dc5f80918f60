"""The simulation section: hit rate per tier, TTFT and throughput against a swept parameter.

Reads `kvtier simulate --json`: one run, or `{"sweep": {"param": NAME, "runs": [run, ...]}}`
where each run carries its parameter value as `value` or under `params[NAME]`. A run of a
reference mode has no clock (`timed` false, `ttft_s` null); its timing charts are left out.
"""

from __future__ import annotations

from html import escape
from typing import Any

from kvtier.errors import KvtierError
from kvtier.report.charts import PALETTE, Series, line_chart, stacked_columns
from kvtier.report.html_fleet import replica_load_figure
from kvtier.report.html_parts import Payload, Section, figure, need, table, tokens

TIER_COLOURS = {"device": PALETTE[0], "host": PALETTE[1], "store": PALETTE[2]}


def sweep_runs(payload: Payload) -> tuple[str, list[Payload]]:
    """(parameter name, runs) of a simulate payload; a single run is a sweep of one, named ''."""
    sweep = payload.get("sweep")
    if sweep is None:
        need(payload, "hit_rate_by_tier", "simulate")
        return "", [payload]
    runs = list(need(sweep, "runs", "simulate sweep"))
    if not runs:
        raise KvtierError("report: the simulate sweep has no runs")
    return str(need(sweep, "param", "simulate sweep")), runs


def run_value(run: Payload, param: str) -> Any:
    """The swept parameter's value in one run."""
    if "value" in run:
        return run["value"]
    return need(need(run, "params", "simulate run"), param, "simulate run params")


def hit_rate_figure(param: str, labels: list[str], runs: list[Payload]) -> str:
    tiers = list(need(runs[0], "hit_rate_by_tier", "simulate run"))
    stacks = [
        (
            tier,
            [100 * float(need(r, "hit_rate_by_tier", "simulate run").get(tier, 0.0)) for r in runs],
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


def timing_figures(param: str, labels: list[str], runs: list[Payload]) -> str:
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
            tuple((x, float(r["ttft_s"][q])) for x, r in zip(xs, runs, strict=True)),
            colour,
        )
        for q, colour in (("p50", PALETTE[0]), ("p99", PALETTE[5]))
    ]
    throughput = Series(
        "throughput",
        tuple(
            (x, float(need(r, "throughput_tok_s", "simulate run")))
            for x, r in zip(xs, runs, strict=True)
        ),
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


def timing_cells(run: Payload) -> list[str]:
    ttft = run.get("ttft_s")
    if not ttft:
        return ["untimed", "untimed", "untimed"]
    thr = float(need(run, "throughput_tok_s", "simulate run"))
    return [f"{float(ttft['p50']):.3f}", f"{float(ttft['p99']):.3f}", f"{thr:,.0f}"]


def simulation_section(payload: Payload) -> Section:
    """Hit rate per tier, TTFT p50/p99 and throughput against the swept parameter."""
    param, runs = sweep_runs(payload)
    labels = [str(run_value(r, param)) for r in runs] if param else ["run"]
    body = hit_rate_figure(param, labels, runs)
    timed = all(r.get("ttft_s") for r in runs)
    if param and len(runs) > 1 and timed:
        body += timing_figures(param, labels, runs)
    if not param:
        body += replica_load_figure(runs[0])
    rows = [
        [
            label,
            tokens(need(r, "requests", "simulate run")),
            f"{100 * float(need(r, 'hit_rate', 'simulate run')):.1f}%",
            *timing_cells(r),
        ]
        for label, r in zip(labels, runs, strict=True)
    ]
    headers = [param or "run", "requests", "hit rate", "TTFT p50 (s)", "TTFT p99 (s)",
               "throughput (tok/s)"]  # fmt: skip
    body += table(headers, rows, "runs")
    notes = "".join(f"<li>{escape(str(n))}</li>" for n in payload.get("notes") or ())
    if notes:
        body += f'<ul class="notes">{notes}</ul>'
    return Section("simulate", "Workload simulation", body)
