"""`kvtier observe` output: a rich terminal view, `--json`, and `--quiet` key lines.

Usage and hit rates print as percentages; the JSON keeps them as 0-1 fractions and is strict
(no NaN: a figure the source did not give is null).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtier.observe.diagnosis import KV_FULL
from kvtier.observe.observer import Observation
from kvtier.observe.timeline import Point
from kvtier.report.observe_payload import observe_payload, rounded

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from kvtier.observe.nvidia_smi import CardReconciliation

_ENGINES = {"sglang": "SGLang", "vllm": "vLLM"}
_COLOURS = {"kv-bound": "red", "compute-bound": "yellow", "not-saturated": "green"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | int | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def quiet_lines(o: Observation) -> list[str]:
    return [
        f"diagnosis {o.diagnosis.verdict}",
        f"samples {o.samples}",
        f"kv_usage_max {rounded(o.kv_usage_max)}",
        f"queue_max {o.queue_max}",
        f"hit_rate {rounded(o.hit_rate)}",
        f"preemptions {o.preemptions}",
    ]


def print_observation(
    o: Observation, as_json: bool, quiet: bool, card: CardReconciliation | None
) -> None:
    from kvtier.report.card_view import print_result

    print_result(o, as_json, quiet, card, observe_payload, quiet_lines, _view)


def _view(console: Console, o: Observation) -> None:
    from rich.table import Table

    engine = _ENGINES.get(o.engine or "", o.engine or "unknown engine")
    console.print(
        f"{engine}, {o.source}: {o.samples:,} periodic sample{'' if o.samples == 1 else 's'}",
        markup=False,
    )
    facts = Table(show_header=False, title="what the server said", title_justify="left")
    facts.add_column("")
    facts.add_column("value", justify="right")
    facts.add_column("from", overflow="fold")
    if o.pool_tokens is not None:
        facts.add_row("KV pool", f"{o.pool_tokens:,} tokens", "startup line")
    if o.peak is not None:
        where = f"line {o.peak.line}" if o.peak.line else o.peak.text
        facts.add_row("peak KV usage", _pct(o.peak.kv_usage), where)
        facts.add_row("  queued at that moment", _num(o.peak.queued), o.peak.time or "")
    facts.add_row("most queued", _num(o.queue_max), "")
    hit_from = {
        "tokens": "cached / (cached + new) prefill tokens",
        "counters": "prefix-cache counters",
        "printed": "the engine's last printed (rolling) figure",
    }.get(o.hit_rate_source or "", "")
    facts.add_row("prefix hit rate", _pct(o.hit_rate), hit_from)
    if o.external_hit_rate is not None:
        facts.add_row("external hit rate", _pct(o.external_hit_rate), "connector")
    facts.add_row("preemptions / retractions", f"{o.preemptions:,}", "")
    console.print(facts)
    if o.timeline:
        console.print(_timeline_table(o.timeline))
    colour = _COLOURS.get(o.diagnosis.verdict, "default")
    console.print(f"[bold {colour}]{o.diagnosis.verdict}[/]: ", end="")
    console.print(o.diagnosis.reason, markup=False)
    for e in o.evidence:
        console.print(f"  {'line ' + str(e.line) if e.line else 'metrics'}: {e.text}", markup=False)
    for step in o.diagnosis.next_steps:
        console.print(f"next: {step}", markup=False)
    if o.skipped:
        console.print(
            f"warning: {o.skipped:,} lines of a known format could not be read", style="yellow"
        )


def _timeline_table(points: tuple[Point, ...], rows: int = 24) -> Table:
    from rich.table import Table

    step = max(1, -(-len(points) // rows))
    table = Table(title="timeline", title_justify="left")
    for name in ("time", "KV usage", "running", "queued", "prompt tok/s", "gen tok/s", "hit rate"):
        table.add_column(name, justify="left" if name == "time" else "right")
    for p in points[::step]:
        kv = _pct(p.kv_usage)
        if p.kv_usage is not None and p.kv_usage >= KV_FULL:
            kv = f"[red]{kv}[/]"
        table.add_row(
            p.time or (f"line {p.line}" if p.line else "-"),
            kv,
            _num(p.running),
            _num(p.queued),
            _num(p.prompt_tps, ",.1f"),
            _num(p.gen_tps, ",.1f"),
            _pct(p.hit_rate),
        )
    return table
