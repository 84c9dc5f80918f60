"""`kvtier advise --workload`: the verdict line, the ranked options as simulated, their flags."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from kvtier.report.json_text import emit
from kvtier.report.ledger_view import terminal
from kvtier.sim.advise import AdvisedOption, WorkloadAdvice

WIDTH = 150  # a table written to a file or pipe: wide enough for every column


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _row(o: AdvisedOption, baseline: bool = False) -> list[str]:
    out = o.outcome
    rank = "base" if baseline else ("-" if o.rank is None else str(o.rank))
    if out is None:
        return [rank, o.name, "-", "-", "-", "-", "-", "-", f"{o.host_gb_per_node:.0f}", "-"]
    gain = "" if baseline or o.gain is None else f"{o.gain:+.1%}"
    slo = {True: "", False: " (misses SLO)", None: ""}[o.meets_slo]
    preempt = "-" if out.preemptions is None else f"{out.preemptions:,}"
    return [
        rank,
        o.name + slo,
        f"{out.hit_rate:.1%}",
        _s(out.ttft_p50_s),
        _s(out.ttft_p90_s),
        f"{out.throughput_tok_s:,.1f}",
        f"{preempt} / {out.rejected:,}",
        f"{out.pcie_busy_fraction:.1%}",
        f"{o.host_gb_per_node:.0f}",
        gain,
    ]


def table(advice: WorkloadAdvice, title: str, options: Sequence[AdvisedOption]) -> Table:
    t = Table(title=title, title_justify="left")
    for name in (
        "#",
        "option",
        "hit rate",
        "TTFT p50 s",
        "TTFT p90 s",
        "tok/s",
        "preempt / rejected",
        "PCIe busy",
        "host GB",
        "gain",
    ):
        t.add_column(name, justify="left" if name == "option" else "right")
    t.add_row(*_row(advice.baseline, baseline=True))
    for o in options:
        if o.outcome is not None:
            t.add_row(*_row(o))
    return t


def detail_lines(options: Sequence[AdvisedOption]) -> list[str]:
    lines = []
    for o in options:
        flags = " ".join(o.flags) or "(no engine flag)"
        unfit = (o.why_not or "").startswith(("host RAM", "no room", "OOM margin"))
        if o.outcome is None and not unfit:
            lines.append(f"- {o.name}: not run: {o.why_not}")
        elif not o.fits:
            lines.append(f"- {o.name}: does not fit: {o.why_not}")
        else:
            lines.append(f"{o.rank}. {o.name}: {flags}; risk: {o.risk}")
    return lines


def quiet_lines(advice: WorkloadAdvice) -> list[str]:
    lines = [f"verdict {advice.verdict.verdict if advice.verdict else '-'}"]
    best = next((o for o in advice.options if o.rank == 1 and o.gain), None)
    lines.append(f"best {best.name if best else 'baseline'}")
    for o in (advice.baseline, *advice.options):
        p90 = o.outcome.ttft_p90_s if o.outcome else None
        lines.append(f"ttft_p90.{o.name.replace(' ', '_')} {_s(p90)}")
    return lines


def print_workload_advice(advice: WorkloadAdvice, as_json: bool, quiet: bool) -> None:
    if as_json:
        emit(advice)
        return
    if quiet:
        print("\n".join([advice.headline, *quiet_lines(advice)]))
        return
    console = terminal()
    if not console.is_terminal:
        console.width = max(console.width, WIDTH)
    print(advice.headline)
    v = advice.verdict
    if v is not None:
        print(f"verdict ({v.source}): {v.verdict}: {v.reason}")
        for line in v.evidence:
            print(f"  {line}")
        for step in v.next_steps:
            print(f"  next: {step}")
    slo = "" if advice.ttft_p90_max_s is None else f", SLO TTFT p90 <= {advice.ttft_p90_max_s:g} s"
    title = f"options on {advice.workload}, ranked by {advice.objective}{slo}"
    console.print(table(advice, title, advice.options))
    for line in detail_lines(advice.options):
        print(line)
    if advice.combinations:
        console.print(table(advice, "combinations of the top options", advice.combinations))
        for line in detail_lines(advice.combinations):
            print(line)
    for note in advice.notes:
        print(f"note: {note}")
    print("each option's figures: `kvtier simulate` with its flags (--json: simulate_args)")
