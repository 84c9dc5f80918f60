"""nvidia-smi's "used" reconciled with the ledger: terminal table, `--json` and `--quiet` lines.

Each figure shows in MiB, as nvidia-smi prints it, beside GiB (2^30 bytes), as the engines do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kvtier.observe.nvidia_smi import MiB
from kvtier.report.json_text import emit
from kvtier.units import GiB

S = TypeVar("S")  # what a command prints: an explanation, an observation

if TYPE_CHECKING:
    from rich.console import Console

    from kvtier.observe.nvidia_smi import CardReconciliation


def _mib(gib: float) -> float:
    return gib * GiB / MiB


@dataclass(frozen=True, slots=True)
class CardGpu:
    index: int
    used_mib: int
    total_mib: int
    used_gib: float
    total_gib: float
    line: int


@dataclass(frozen=True, slots=True)
class CardItem:
    item: str
    mib: float
    gib: float
    source: str
    exact: bool


@dataclass(frozen=True, slots=True)
class CardPayload:
    """The reconciliation as `--json` prints it (MiB rounded to 1, GiB to 4 decimals)."""

    units: str
    gpus: tuple[CardGpu, ...]
    compared_gpu: int
    used_mib: int
    items: tuple[CardItem, ...]
    remainder_gib: float
    unsized: tuple[str, ...]
    notes: tuple[str, ...]


def card_payload(c: CardReconciliation) -> CardPayload:
    return CardPayload(
        units="MiB (2**20 bytes) as nvidia-smi prints; GiB (2**30 bytes)",
        gpus=tuple(
            CardGpu(
                g.index,
                g.used_mib,
                g.total_mib,
                round(g.used_gib, 4),
                round(g.total_gib, 4),
                g.line,
            )
            for g in c.gpus
        ),
        compared_gpu=c.compared.index,
        used_mib=c.compared.used_mib,
        items=tuple(
            CardItem(i.item, round(_mib(i.gib), 1), round(i.gib, 4), i.source, i.exact)
            for i in (*c.items, c.remainder)
        ),
        remainder_gib=round(c.remainder.gib, 4),
        unsized=tuple(c.unsized),
        notes=tuple(c.notes),
    )


def card_quiet(c: CardReconciliation) -> list[str]:
    g = c.compared
    figures = (("gpu", g.index), ("used_mib", g.used_mib), ("total_mib", g.total_mib))
    return [f"nvidia_smi_{key} {value}" for key, value in figures] + [
        f"nvidia_smi_remainder_gib {c.remainder.gib:.2f}"
    ]


def print_result(
    subject: S,
    as_json: bool,
    quiet: bool,
    card: CardReconciliation | None,
    payload: Callable[[S, CardReconciliation | None], object],
    lines: Callable[[S], list[str]],
    view: Callable[[Console, S], None],
) -> None:
    """`--json` prints the subject's payload, `--quiet` its key lines then the card's; otherwise
    `view` draws it on the terminal, then the card's tables follow."""
    if as_json:
        emit(payload(subject, card))
        return
    if quiet:
        print("\n".join(lines(subject) + (card_quiet(card) if card is not None else [])))
        return
    from kvtier.report.ledger_view import terminal

    console = terminal()
    view(console, subject)
    if card is not None:
        console.print()
        print_card(console, card)


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
