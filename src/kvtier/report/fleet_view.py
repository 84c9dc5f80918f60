"""Terminal views of a fleet run: the fleet as one, each replica, and sweeps over policies or
replica counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvtier.report.sim_view import run_table, seconds

if TYPE_CHECKING:
    from rich.table import Table

    from kvtier.sim.fleet.result import FleetResult


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def fleet_table(fleet: FleetResult, title: str) -> Table:
    table = run_table(fleet.result, title)
    table.add_row("replicas / router", f"{len(fleet.replicas)} / {fleet.router}")
    if fleet.shared_store:
        table.add_row("hits in the shared store", _pct(fleet.hit_rate_by_tier()["shared"]))
    if fleet.ttft_mean_s is not None:
        table.add_row("TTFT mean (s)", seconds(fleet.ttft_mean_s))
    table.add_row("waiting requests mean / max", f"{fleet.queue_mean:,.1f} / {fleet.queue_max:,}")
    table.add_row("imbalance (max / mean requests)", f"{fleet.imbalance:.3f}")
    if fleet.preemptions is not None:
        table.add_row("preemptions", f"{fleet.preemptions:,}")
    return table


def replica_table(fleet: FleetResult) -> Table:
    from rich.table import Table

    table = Table(title="replicas", title_justify="left")
    for name in ("replica", "requests", "hit rate", "busy", "queue mean / max"):
        table.add_column(name, justify="right")
    for i, r in enumerate(fleet.replicas):
        table.add_row(
            str(i),
            f"{r.requests:,}",
            _pct(r.hit_rate),
            _pct(r.busy_fraction),
            f"{r.queue_mean:,.1f} / {r.queue_max:,}",
        )
    return table


def fleet_sweep_table(param: str, values: Sequence[str], runs: Sequence[FleetResult]) -> Table:
    from rich.table import Table

    table = Table(title=f"sweep over {param}", title_justify="left")
    heads = ("hit rate", "TTFT mean / p90 (s)", "output tok/s", "imbalance", "queue mean")
    for name in (param, *heads):
        table.add_column(name, justify="right")
    for value, run in zip(values, runs, strict=True):
        t = run.result.ttft_s
        ttft = (
            "-"
            if t is None or run.ttft_mean_s is None
            else (f"{seconds(run.ttft_mean_s)} / {seconds(t.p90)}")
        )
        table.add_row(
            value,
            _pct(run.result.hit_rate),
            ttft,
            f"{run.result.throughput_tok_s:,.1f}",
            f"{run.imbalance:.3f}",
            f"{run.queue_mean:,.1f}",
        )
    return table
