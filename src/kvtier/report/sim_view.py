"""Terminal rendering of simulation results (rich tables): one run, or a sweep of runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvtier.sim.metrics import SimResult

if TYPE_CHECKING:
    from rich.table import Table


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _s(x: float) -> str:
    return f"{x:.3f}" if x < 100 else f"{x:,.1f}"


def run_table(result: SimResult, title: str) -> Table:
    """Hit rates by tier, latency, throughput, concurrency and tier traffic of one run."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    warm = "" if result.measured == result.requests else f" (last {result.measured:,})"
    table.add_row("requests", f"{result.requests:,}{warm}")
    table.add_row("finished / rejected", f"{result.finished:,} / {result.rejected:,}")
    table.add_row("token hit rate, all tiers", _pct(result.hit_rate))
    for tier, rate in result.hit_rate_by_tier.items():
        table.add_row(f"  {tier}", _pct(rate))
    table.add_row("prefill tokens saved", f"{result.prefill_tokens_saved:,}")
    if result.timed and result.ttft_s and result.queue_s:
        t, q = result.ttft_s, result.queue_s
        table.add_row("TTFT p50 / p90 / p99 (s)", f"{_s(t.p50)} / {_s(t.p90)} / {_s(t.p99)}")
        table.add_row("queueing p50 / p99 (s)", f"{_s(q.p50)} / {_s(q.p99)}")
        table.add_row("output throughput (tok/s)", f"{result.throughput_tok_s:,.1f}")
        table.add_row("simulated time (s)", f"{result.duration_s:,.1f}")
        table.add_row(
            "running requests max / mean",
            f"{result.concurrency_max} / {result.concurrency_mean:.1f}",
        )
        table.add_row("PCIe busy (host->device loads)", _pct(result.pcie_busy_fraction))
    for tier, n in result.evictions.items():
        table.add_row(f"pages evicted from {tier}", f"{n:,}")
    return table


def rejected_line(result: SimResult, limit: int = 20) -> str:
    """The requests that can never run, by trace position, or '' when none."""
    if not result.rejected:
        return ""
    ids = ", ".join(str(i) for i in result.rejected_ids[:limit])
    more = f" and {result.rejected - limit} more" if result.rejected > limit else ""
    return f"{result.rejected} requests can never fit on the device and were rejected: {ids}{more}"


def sweep_table(param: str, values: Sequence[str], results: Sequence[SimResult]) -> Table:
    """One row per swept value: hit rates, TTFT p50/p99 and throughput."""
    from rich.table import Table

    table = Table(title=f"sweep over {param}", title_justify="left")
    table.add_column(param, justify="right")
    table.add_column("hit rate", justify="right")
    table.add_column("device", justify="right")
    table.add_column("host", justify="right")
    table.add_column("TTFT p50 (s)", justify="right")
    table.add_column("TTFT p99 (s)", justify="right")
    table.add_column("tok/s", justify="right")
    table.add_column("rejected", justify="right")
    for value, r in zip(values, results, strict=True):
        by_tier = r.hit_rate_by_tier
        ttft = r.ttft_s
        table.add_row(
            value,
            _pct(r.hit_rate),
            _pct(by_tier.get("device", 0.0)),
            _pct(by_tier.get("host", 0.0)),
            _s(ttft.p50) if ttft else "-",
            _s(ttft.p99) if ttft else "-",
            f"{r.throughput_tok_s:,.1f}" if r.timed else "-",
            str(r.rejected),
        )
    return table
