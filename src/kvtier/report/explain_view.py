"""`kvtier explain` output: the reconciliation, the log's ledger, the answer and the options.

Terminal output uses rich tables; `--json` carries the same figures. GPU figures are GiB (2**30)
per GPU, as the engines print them; host RAM is decimal GB, as SGLang sizes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtier.report.explain_payload import explain_payload, log_rows

if TYPE_CHECKING:
    from rich.console import Console

    from kvtier.ledger.explain import Explanation
    from kvtier.observe.nvidia_smi import CardReconciliation


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{round(value, 4):g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    # a dtype is named as everywhere else in kvtier: bfloat16, not torch.bfloat16
    return str(value).removeprefix("torch.")


def quiet_lines(e: Explanation) -> list[str]:
    """The key figures as `key value` lines, plain numbers (no separators, GiB to 2 decimals)."""
    rec, ledger = e.reconciliation, e.ledger
    lines = [
        f"observed_kv_tokens {rec.observed.value if rec.observed is not None else 'none'}",
        f"predicted_kv_tokens {rec.predicted}",
        f"predicted_kv_tokens_range {rec.predicted_low} {rec.predicted_high}",
        f"difference {rec.difference}",
        f"difference_pct {100 * rec.relative_difference:.2f}",
        f"verdict {rec.status.replace(' ', '_')}",
        f"kv_bytes_per_token {rec.kv_bytes_per_token}",
        f"kv_cache_dtype {rec.kv_dtype.name}",
    ]
    if ledger.reserve is not None:
        lines.append(f"reserve_gib {ledger.reserve.gib:.2f}")
    if ledger.free_end is not None:
        lines.append(f"free_end_gib {ledger.free_end.gib:.2f}")
    return lines


def print_explanation(
    e: Explanation, as_json: bool, quiet: bool, card: CardReconciliation | None
) -> None:
    from kvtier.report.card_view import print_result

    print_result(e, as_json, quiet, card, explain_payload, quiet_lines, _view)


def _view(console: Console, e: Explanation) -> None:
    from rich.text import Text

    _header(console, e)
    _ledger(console, e)
    console.print()
    console.print(e.ledger.answer, markup=False)
    _options(console, e)
    for note in e.reconciliation.notes:
        console.print(f"note: {note}", markup=False)
    for warning in e.reconciliation.warnings:
        console.print(Text.assemble(("warning:", "yellow"), f" {warning}"))


def _header(console: Console, e: Explanation) -> None:
    from rich.table import Table

    rec = e.reconciliation
    console.print(
        f"{'SGLang' if e.engine == 'sglang' else 'vLLM'} startup log: "
        f"{rec.model.model_id} ({rec.model_source.where}), "
        f"{rec.kv_bytes_per_token:,} bytes of KV per token per GPU ({rec.kv_dtype.name})",
        markup=False,
    )
    table = Table(title="KV tokens: logged vs recomputed", title_justify="left")
    table.add_column("")
    table.add_column("tokens", justify="right")
    table.add_column("from", overflow="fold")
    if rec.observed is not None:
        table.add_row("observed", f"{rec.observed.value:,}", rec.observed.where)
    else:
        table.add_row("observed", "-", "the failed start printed no count")
    spread = f"; rounding of the printed figures{rec.widened}: "
    spread += f"{rec.predicted_low:,} - {rec.predicted_high:,}"
    table.add_row(
        "predicted",
        f"{rec.predicted:,}",
        rec.formula + ("" if rec.unchecked is not None else spread),
    )
    table.add_row("difference", f"{rec.difference:+,}", f"{rec.relative_difference:+.2%}")
    console.print(table)
    colour = {"match": "green", "observed only": "yellow"}.get(rec.status, "red")
    console.print(rec.verdict, style=colour, markup=False)
    inputs = Table(title="inputs", title_justify="left")
    inputs.add_column("input")
    inputs.add_column("value", justify="right")
    inputs.add_column("from", overflow="fold")
    for name, fact in rec.inputs:
        mark = " (estimated)" if name in rec.estimated else ""
        inputs.add_row(name + mark, _value(fact.value), fact.where)
    console.print(inputs)


def _ledger(console: Console, e: Explanation) -> None:
    from rich.table import Table

    from kvtier.report.ledger_view import gib_cell

    table = Table(title="one GPU, from the log (GiB = 2^30 bytes)", title_justify="left")
    table.add_column("item")
    table.add_column("GiB", justify="right")
    table.add_column("source", overflow="fold")
    unlogged = list(e.ledger.unlogged)
    for part, item in log_rows(e.ledger):
        if part == "free":
            for u in unlogged:
                table.add_row(f"  {u.item}", "?", f"not in the log: {u.why}")
            unlogged = []
        name = f"  {item.item}" if part == "from reserve" else item.item
        table.add_row(name, gib_cell(item.gib, item.exact), item.source)
    for u in unlogged:
        table.add_row(f"  {u.item}", "?", f"not in the log: {u.why}")
    console.print(table)


def _options(console: Console, e: Explanation) -> None:
    from kvtier.report.ledger_view import options_table, print_option_details

    menu = e.options
    if menu is None:
        return
    if menu.note:
        console.print(f"note: {menu.note}", markup=False)
    if menu.base is None or not menu.options:
        return
    console.print()
    console.print(options_table(menu.base, menu.options))
    print_option_details(console, menu.options)
