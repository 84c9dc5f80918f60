"""Terminal rendering of simulation results (rich tables): one run, or a sweep of runs.

Hit rates and shares are percentages to two decimals; seconds carry three significant digits,
so that a column of TTFTs reads alike from milliseconds to minutes. The sweep table fits 80
columns. `quiet_lines` gives the key figures as `key value` lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvtier.sim.metrics import SimResult

if TYPE_CHECKING:
    from rich.table import Table

# swept flag -> its short column header
SHORT_NAMES = {
    "hicache-ratio": "ratio",
    "mem-fraction-static": "fraction",
    "kv-cache-dtype": "dtype",
    "pcie-gbps": "PCIe GB/s",
}


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def seconds(x: float) -> str:
    """Three significant digits, never an exponent: 0.0123, 0.123, 1.23, 12.3, 123, 1,234."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def run_table(result: SimResult, title: str) -> Table:
    """Hit rates by tier, latency, throughput, concurrency and tier traffic of one run."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    warm = (
        ""
        if result.measured_requests == result.requests
        else f" (last {result.measured_requests:,})"
    )
    table.add_row("requests", f"{result.requests:,}{warm}")
    table.add_row("finished / rejected", f"{result.finished:,} / {result.rejected:,}")
    table.add_row("token hit rate, all tiers", _pct(result.hit_rate))
    for tier, rate in result.hit_rate_by_tier.items():
        table.add_row(f"  {tier}", _pct(rate))
    if result.hit_rate_by_round is not None:
        ttft = result.ttft_mean_s_by_round
        table.add_row("token hit rate by round" + (" / mean TTFT (s)" if ttft else ""), "")
        for turn, share in enumerate(result.hit_rate_by_round):
            text = "-" if share is None else _pct(share)
            if ttft:
                mean = ttft[turn] if turn < len(ttft) else None
                text += " / " + ("-" if mean is None else seconds(mean))
            table.add_row(f"  round {turn}", text)
    table.add_row("prefill tokens saved", f"{result.prefill_tokens_saved:,}")
    if result.timed and result.ttft_s and result.queue_s:
        t, q = result.ttft_s, result.queue_s
        table.add_row(
            "TTFT p50 / p90 / p99 (s)", f"{seconds(t.p50)} / {seconds(t.p90)} / {seconds(t.p99)}"
        )
        table.add_row("queueing p50 / p99 (s)", f"{seconds(q.p50)} / {seconds(q.p99)}")
        table.add_row("output throughput (tok/s)", f"{result.throughput_tok_s:,.1f}")
        table.add_row("simulated time (s)", f"{result.duration_s:,.1f}")
        table.add_row(
            "running requests max / mean",
            f"{result.concurrency.max:,} / {result.concurrency.mean:,.1f}",
        )
        table.add_row("PCIe busy (host->device loads)", _pct(result.pcie_busy_fraction))
    if isinstance(preempted := result.params.get("preemptions"), int):
        table.add_row("preemptions (recomputed)", f"{preempted:,}")
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
    """One row per swept value: hit rates (%), TTFT p50/p99 (s), throughput and rejections."""
    from rich.table import Table

    table = Table(
        title=f"sweep over --{param}",
        caption="hit %: prompt tokens found in a cache tier (all, device, host)",
        title_justify="left",
        caption_justify="left",
    )
    for header in (
        SHORT_NAMES.get(param, param),
        "hit %",
        "device",
        "host",
        "p50 s",
        "p99 s",
        "tok/s",
        "rej",
    ):
        table.add_column(header, justify="right")
    for value, r in zip(values, results, strict=True):
        by_tier = r.hit_rate_by_tier
        ttft = r.ttft_s
        table.add_row(
            value,
            f"{100 * r.hit_rate:.2f}",
            f"{100 * by_tier.get('device', 0.0):.2f}",
            f"{100 * by_tier.get('host', 0.0):.2f}",
            seconds(ttft.p50) if ttft else "-",
            seconds(ttft.p99) if ttft else "-",
            f"{r.throughput_tok_s:,.1f}" if r.timed else "-",
            f"{r.rejected:,}",
        )
    return table


def quiet_lines(result: SimResult, suffix: str = "") -> list[str]:
    """The key figures of one run as `key value` lines; `suffix` tells sweep runs apart."""
    lines = [
        f"requests{suffix} {result.requests}",
        f"rejected{suffix} {result.rejected}",
        f"hit_rate_pct{suffix} {100 * result.hit_rate:.2f}",
    ]
    lines += [
        f"hit_rate_pct.{tier}{suffix} {100 * rate:.2f}"
        for tier, rate in result.hit_rate_by_tier.items()
    ]
    lines += [
        f"hit_rate_pct.round{turn}{suffix} {100 * share:.2f}"
        for turn, share in enumerate(result.hit_rate_by_round or ())
        if share is not None
    ]
    if result.timed and result.ttft_s:
        t = result.ttft_s
        lines += [
            f"ttft_p50_s{suffix} {t.p50:.3f}",
            f"ttft_p99_s{suffix} {t.p99:.3f}",
            f"throughput_tok_s{suffix} {result.throughput_tok_s:.1f}",
        ]
    if isinstance(preempted := result.params.get("preemptions"), int):
        lines.append(f"preemptions{suffix} {preempted}")
    return lines


def sweep_quiet_lines(param: str, values: Sequence[str], results: Sequence[SimResult]) -> list[str]:
    """`quiet_lines` of each run, keys suffixed `@NAME=VALUE`."""
    return [
        line
        for value, r in zip(values, results, strict=True)
        for line in quiet_lines(r, f"@{param}={value}")
    ]
