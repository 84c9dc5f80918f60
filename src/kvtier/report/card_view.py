"""nvidia-smi's "used" reconciled with the ledger: terminal table, `--json` and `--quiet` lines.

Each figure shows in MiB, as nvidia-smi prints it, beside GiB (2^30 bytes), as the engines do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvtier.observe.nvidia_smi import MiB
from kvtier.units import GiB

if TYPE_CHECKING:
    from rich.console import Console

    from kvtier.observe.nvidia_smi import CardReconciliation, GpuMemory


def _mib(gib: float) -> float:
    return gib * GiB / MiB


def _gpu_json(g: GpuMemory) -> dict[str, Any]:
    return {
        "index": g.index,
        "used_mib": g.used_mib,
        "total_mib": g.total_mib,
        "used_gib": round(g.used_gib, 4),
        "total_gib": round(g.total_gib, 4),
        "line": g.line,
    }


def card_json(c: CardReconciliation) -> dict[str, Any]:
    """The reconciliation as strict-JSON-ready values (MiB rounded to 1, GiB to 4 decimals)."""
    rows = [*c.items, c.remainder]
    return {
        "units": "MiB (2**20 bytes) as nvidia-smi prints; GiB (2**30 bytes)",
        "gpus": [_gpu_json(g) for g in c.gpus],
        "compared_gpu": c.compared.index,
        "used_mib": c.compared.used_mib,
        "items": [
            {
                "item": i.item,
                "mib": round(_mib(i.gib), 1),
                "gib": round(i.gib, 4),
                "source": i.source,
                "exact": i.exact,
            }
            for i in rows
        ],
        "remainder_gib": round(c.remainder.gib, 4),
        "unsized": list(c.unsized),
        "notes": list(c.notes),
    }


def card_quiet(c: CardReconciliation) -> list[str]:
    return [
        f"nvidia_smi_gpu {c.compared.index}",
        f"nvidia_smi_used_mib {c.compared.used_mib}",
        f"nvidia_smi_total_mib {c.compared.total_mib}",
        f"nvidia_smi_remainder_gib {c.remainder.gib:.2f}",
    ]


def print_card(console: Console, c: CardReconciliation) -> None:
    from rich.table import Table

    from kvtier.report.ledger_view import gib_cell

    g = c.compared
    gpus = Table(title="nvidia-smi, every GPU", title_justify="left")
    for name in ("GPU", "used MiB", "total MiB", "used GiB", "line"):
        gpus.add_column(name, justify="left" if name == "GPU" else "right")
    for row in c.gpus:
        mark = " (compared)" if row is g else ""
        gpus.add_row(
            f"{row.index}{mark}",
            f"{row.used_mib:,}",
            f"{row.total_mib:,}",
            f"{row.used_gib:.2f}",
            str(row.line),
        )
    console.print(gpus)
    table = Table(
        title=f"GPU {g.index}: nvidia-smi used {g.used_mib:,} MiB = {g.used_gib:.2f} GiB "
        f"of {g.total_gib:.2f} GiB, item by item",
        title_justify="left",
    )
    table.add_column("item")
    table.add_column("MiB", justify="right")
    table.add_column("GiB", justify="right")
    table.add_column("source", overflow="fold")
    for i in (*c.items, c.remainder):
        table.add_row(i.item, f"{_mib(i.gib):,.0f}", gib_cell(i.gib, i.exact), i.source)
    table.add_row("used (nvidia-smi)", f"{g.used_mib:,}", f"{g.used_gib:.2f}", f"line {g.line}")
    console.print(table)
    for note in c.notes:
        console.print(f"note: {note}", markup=False)
