"""Terminal rendering of a `Ledger` and of capacity options (rich tables); `--json` and `--quiet`.

`ledger_table` and `options_table` are reused by `explain`. Figures are GiB (2**30) per GPU;
estimated figures are marked with `~` and their source states the range.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvtier.budget.ledger import Ledger

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from kvtier.budget.advise import Option
    from kvtier.budget.target import TargetAnswer

ESTIMATED_MARK = "~"


def _tokens(ledger: Ledger) -> str:
    text = f"{ledger.kv_tokens:,}"
    if ledger.kv_tokens_range:
        low, high = ledger.kv_tokens_range
        text += f" (estimated, {low:,} - {high:,})"
    return text


def ledger_table(ledger: Ledger) -> Table:
    """One GPU's items with GiB to two decimals and where each figure comes from."""
    from rich.table import Table

    table = Table(
        title=f"one GPU of {ledger.gpus} x {ledger.gpu} (GiB = 2^30 bytes)", title_justify="left"
    )
    table.add_column("item")
    table.add_column("GiB", justify="right")
    table.add_column("source", overflow="fold")
    for it in ledger.items:
        mark = "" if it.exact else ESTIMATED_MARK
        table.add_row(it.item, f"{mark}{it.gib:.2f}", it.source)
    return table


def concurrency_table(ledger: Ledger) -> Table:
    from rich.table import Table

    table = Table(title="requests the KV pool holds at once", title_justify="left")
    table.add_column("context (tokens)", justify="right")
    table.add_column("requests", justify="right")
    for c in ledger.concurrency:
        text = f"{c.requests:.2f}"
        if c.low is not None and c.high is not None:
            text += f" ({c.low:.2f} - {c.high:.2f})"
        table.add_row(f"{c.context:,}", text)
    return table


def options_table(options: Sequence[Option], contexts: Sequence[int]) -> Table:
    """Ways to more KV capacity: predicted tokens, concurrency, cost/risk and the engine flags."""
    from rich.table import Table

    table = Table(title="options (tokens are GPU KV tokens per rank's pool)", title_justify="left")
    table.add_column("option")
    table.add_column("KV tokens", justify="right")
    for ctx in contexts:
        table.add_column(f"@{ctx // 1024}k" if ctx % 1024 == 0 else f"@{ctx}", justify="right")
    table.add_column("cost / risk", overflow="fold")
    table.add_column("flags", overflow="fold")
    for opt in options:
        conc = dict(opt.concurrency)
        cells = [f"{conc[c]:.2f}" if c in conc else "-" for c in contexts]
        tokens = f"{opt.kv_tokens:,}" if opt.kv_tokens is not None else "-"
        table.add_row(opt.name, tokens, *cells, opt.cost, " ".join(opt.flags))
    return table


def render_ledger(ledger: Ledger, console: Console) -> None:
    console.print(f"[bold]{ledger.engine}[/] {ledger.model} - {ledger.era}")
    console.print(ledger_table(ledger))
    console.print(
        f"KV tokens: [bold]{_tokens(ledger)}[/]  ({ledger.kv_bytes_per_token:,} B per "
        f"token per GPU, page {ledger.page_size})"
    )
    if ledger.max_running_requests is not None:
        console.print(f"max running requests: {ledger.max_running_requests:,}")
    if ledger.host_pool is not None:
        h = ledger.host_pool
        console.print(
            f"host pool: {h.tokens:,} tokens, {h.bytes_per_rank / 1e9:.1f} GB per rank, "
            f"{h.bytes_per_node / 1e9:.1f} GB per node ({h.source})"
        )
    console.print(concurrency_table(ledger))
    for row in ledger.inputs:
        console.print(f"  input {row.name}: {row.value}  [dim]({row.origin})[/]")
    for note in ledger.notes:
        console.print(f"  note: {note}")
    if not ledger.exact:
        console.print(
            f"  {ESTIMATED_MARK} estimated: pass the measured figures "
            "(--free-before-load-gib/--free-after-load-gib or --weights-gib ...) "
            "for exact numbers"
        )


def quiet_lines(ledger: Ledger) -> list[str]:
    """The key figures, one per line."""
    lines = [
        f"kv_tokens {_tokens(ledger)}",
        f"kv_bytes_per_token {ledger.kv_bytes_per_token}",
        f"kv_pool_gib {ledger.item('KV cache pool').gib:.2f}",
    ]
    lines += [f"requests@{c.context} {c.requests:.2f}" for c in ledger.concurrency]
    return lines


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def print_ledger(ledger: Ledger, as_json: bool = False, quiet: bool = False) -> None:
    if as_json:
        print_json(ledger.to_json())
    elif quiet:
        print("\n".join(quiet_lines(ledger)))
    else:
        from rich.console import Console

        render_ledger(ledger, Console())


def print_advice(
    ledger: Ledger,
    options: Sequence[Option],
    answer: TargetAnswer | None,
    as_json: bool = False,
    quiet: bool = False,
) -> None:
    """The base ledger's key figures, the options table and the answer to a target, if asked."""
    if as_json:
        data = ledger.to_json()
        data["options"] = [o.to_json() for o in options]
        data["target"] = answer.to_json() if answer else None
        print_json(data)
        return
    if quiet:
        lines = quiet_lines(ledger)
        lines += [
            f"option {o.name}: {o.kv_tokens if o.kv_tokens is not None else '-'}" for o in options
        ]
        if answer:
            lines.append(f"target: {answer.reason}")
        print("\n".join(lines))
        return
    from rich.console import Console

    console = Console()
    console.print(
        f"[bold]{ledger.engine}[/] {ledger.model} on {ledger.gpus} x {ledger.gpu}: "
        f"KV tokens {_tokens(ledger)}, fraction {ledger.mem_fraction}"
    )
    console.print(options_table(options, [c.context for c in ledger.concurrency]))
    if answer:
        flags = " ".join(answer.option.flags) if answer.option else ""
        console.print(
            f"target {answer.requests} x {answer.context:,} tokens "
            f"({answer.tokens_needed:,} needed): {answer.reason}"
            + (f"\n  flags: {flags}" if flags else "")
        )
