"""The HTML section of `kvtier advise --workload`: the verdict line, one chart of every
option's TTFT p90 and throughput against the baseline, and the ranked table with the flags."""

from __future__ import annotations

from html import escape

from kvtier.report.chart_scatter import Dot, scatter
from kvtier.report.html_parts import Section, figure, table
from kvtier.sim.advise import AdvisedOption, WorkloadAdvice, beats_baseline


def _tip(o: AdvisedOption, rank: str) -> str:
    assert o.outcome is not None and o.outcome.ttft_p90_s is not None
    return (
        f"{rank}{o.name}: TTFT p90 {o.outcome.ttft_p90_s:.3g} s, "
        f"{o.outcome.throughput_tok_s:,.1f} tok/s, hit rate {o.outcome.hit_rate:.1%}"
    )


def _drawn(options: tuple[AdvisedOption, ...]) -> list[AdvisedOption]:
    return [o for o in options if o.outcome is not None and o.outcome.ttft_p90_s is not None]


def options_chart(advice: WorkloadAdvice) -> str:
    base = advice.baseline
    assert base.outcome is not None and base.outcome.ttft_p90_s is not None
    points = [
        Dot(
            str(o.rank) if o.rank is not None else "",
            _tip(o, f"{o.rank}. " if o.rank is not None else ""),
            o.outcome.ttft_p90_s,
            o.outcome.throughput_tok_s,
            beats_baseline(o),
        )
        for o in _drawn((*advice.options, *advice.combinations))
        if o.outcome is not None and o.outcome.ttft_p90_s is not None
    ]
    ref = Dot("", _tip(base, ""), base.outcome.ttft_p90_s, base.outcome.throughput_tok_s, True)
    svg = scatter(
        points,
        ref,
        title="Each option's TTFT p90 and throughput against the baseline",
        x_label="TTFT p90 (s), lower is better",
        y_label="output tokens per second",
        legend=("baseline", f"beats the baseline on {advice.objective}", "no gain"),
        x_fmt=lambda v: f"{v:g}",
        y_fmt=lambda v: f"{v:,.0f}",
    )
    caption = (
        "Every option (and pair) as `kvtier simulate` ran it on the workload; the number is its "
        "rank. Up and to the left of the dashed lines is better than the baseline on both."
    )
    return figure("Options against the baseline", svg, caption)


def _row(o: AdvisedOption, rank: str) -> list[str]:
    out = o.outcome
    if out is None:
        return [rank, o.name, "", "", "", "", f"{o.host_gb_per_node:.0f}", "", o.why_not or ""]
    return [
        rank,
        o.name,
        f"{out.hit_rate:.1%}",
        "-" if out.ttft_p50_s is None else f"{out.ttft_p50_s:.3g}",
        "-" if out.ttft_p90_s is None else f"{out.ttft_p90_s:.3g}",
        f"{out.throughput_tok_s:,.1f}",
        f"{o.host_gb_per_node:.0f}",
        "" if o.gain is None else f"{o.gain:+.1%}",
        " ".join(o.flags),
    ]


def advice_section(advice: WorkloadAdvice) -> Section:
    body = f"<p><strong>{escape(advice.headline)}</strong></p>"
    if advice.verdict is not None:
        v = advice.verdict
        body += f"<p>{escape(v.source)}: {escape(v.verdict)}: {escape(v.reason)}</p>"
    body += options_chart(advice)
    rows = [_row(advice.baseline, "base")]
    rows += [_row(o, "-" if o.rank is None else str(o.rank)) for o in advice.options]
    rows += [_row(o, "pair") for o in advice.combinations]
    headers = ["#", "option", "hit rate", "TTFT p50 (s)", "TTFT p90 (s)", "tok/s", "host GB",
               "gain", "engine flags / why not"]  # fmt: skip
    body += table(headers, rows, "options")
    title = f"Options on {advice.workload}, ranked by {advice.objective}"
    return Section("advise-workload", title, body)
