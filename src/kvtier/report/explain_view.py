"""`kvtier explain` output: the reconciliation, the log's ledger, the answer and the options.

Terminal output uses rich tables; `--json` carries the same figures. GPU figures are GiB (2**30)
per GPU, as the engines print them; host RAM is decimal GB, as SGLang sizes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvtier.report.json_text import json_text

if TYPE_CHECKING:
    from rich.console import Console

    from kvtier.engines.explain import LogLedger
    from kvtier.engines.ledger import LedgerItem
    from kvtier.ledger.explain import Explanation
    from kvtier.logs.facts import Fact
    from kvtier.observe.nvidia_smi import CardReconciliation


def explanation_json(e: Explanation) -> dict[str, Any]:
    """The machine-readable explanation (stable keys: engine, model, observed, predicted, ...)."""
    rec, ledger = e.reconciliation, e.ledger
    base = e.options.base if e.options is not None else None
    observed = rec.observed
    return {
        "engine": e.engine,
        "model": {
            "id": rec.model.model_id,
            "source": _where(rec.model_source),
            "geometry": "catalog or config.json" if e.inputs.model_known else "from the log",
        },
        "units": "GiB (2**30 bytes) per GPU; host RAM in decimal GB",
        "observed": {
            "kv_tokens": observed.value if observed is not None else None,
            "source": _where(observed) if observed is not None else None,
        },
        "failed": None
        if rec.failure is None
        else {"reason": rec.failure.value, "source": _where(rec.failure)},
        "predicted": {
            "kv_tokens": rec.predicted,
            "range": [rec.predicted_low, rec.predicted_high],
            "formula": rec.formula,
        },
        "difference": rec.difference,
        "relative_difference": round(rec.relative_difference, 6),
        "verdict": rec.status,
        "verdict_text": rec.verdict,
        "kv_bytes_per_token": rec.kv_bytes_per_token,
        "kv_cache_dtype": rec.kv_dtype.name,
        "page_size": rec.page_size,
        "inputs": [
            {
                "name": name,
                "value": fact.value,
                "source": _where(fact),
                "estimated": name in rec.estimated,
            }
            for name, fact in rec.inputs
        ],
        "ledger": [
            {
                "item": i.item,
                "gib": round(i.gib, 4),
                "source": i.source,
                "exact": i.exact,
                "part": part,
            }
            for part, i in _rows(ledger)
        ],
        "reserve_gib": round(ledger.reserve.gib, 4) if ledger.reserve else None,
        "free_end_gib": round(ledger.free_end.gib, 4) if ledger.free_end else None,
        "not_in_log": [{"item": name, "why": why} for name, why in ledger.unlogged],
        "answer": ledger.answer,
        "options": [o.to_json() for o in e.options.options] if e.options is not None else [],
        "options_priced_at_kv_tokens": base.kv_tokens if base else None,
        "max_running_requests": base.max_running_requests if base else None,
        "notes": list(rec.notes) + ([e.options.note] if e.options and e.options.note else []),
        "warnings": list(rec.warnings),
    }


def _rows(ledger: LogLedger) -> list[tuple[str, LedgerItem]]:
    """Ledger rows in order, each tagged: "card" (up to the KV pool), "reserve", "from reserve",
    "free"."""
    rows = [("card", i) for i in ledger.items]
    if ledger.reserve is not None:
        rows.append(("reserve", ledger.reserve))
    rows += [("from reserve", i) for i in ledger.reserve_uses]
    if ledger.free_end is not None:
        rows.append(("free", ledger.free_end))
    return rows


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


def _where(fact: Fact[Any]) -> dict[str, Any]:
    return {"line": fact.line, "text": fact.text.strip(), "rank": fact.rank}


def print_explanation(
    e: Explanation,
    as_json: bool = False,
    quiet: bool = False,
    card: CardReconciliation | None = None,
) -> None:
    from kvtier.report.card_view import card_json, card_quiet, print_card

    if as_json:
        payload = explanation_json(e)
        if card is not None:
            payload["nvidia_smi"] = card_json(card)
        print(json_text(payload))
        return
    if quiet:
        print("\n".join(quiet_lines(e) + (card_quiet(card) if card is not None else [])))
        return
    from rich.text import Text

    from kvtier.report.ledger_view import terminal

    console = terminal()
    _header(console, e)
    _ledger(console, e)
    console.print()
    console.print(e.ledger.answer, markup=False)
    _options(console, e)
    for note in e.reconciliation.notes:
        console.print(f"note: {note}", markup=False)
    for warning in e.reconciliation.warnings:
        console.print(Text.assemble(("warning:", "yellow"), f" {warning}"))
    if card is not None:
        console.print()
        print_card(console, card)


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
    table.add_row(
        "predicted",
        f"{rec.predicted:,}",
        f"{rec.formula}; rounding of the printed figures: "
        f"{rec.predicted_low:,} - {rec.predicted_high:,}",
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
    for part, item in _rows(e.ledger):
        if part == "free":
            for name, why in unlogged:
                table.add_row(f"  {name}", "?", f"not in the log: {why}")
            unlogged = []
        name = f"  {item.item}" if part == "from reserve" else item.item
        table.add_row(name, gib_cell(item.gib, item.exact), item.source)
    for name, why in unlogged:
        table.add_row(f"  {name}", "?", f"not in the log: {why}")
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
