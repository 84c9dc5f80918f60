"""Terminal rendering of a `Ledger` and of capacity options (rich tables); `--json` and `--quiet`.

`options_table` and `print_option_details` are reused by `explain`. Figures are GiB (2**30) per
GPU to two decimals; host sizes are decimal GB; estimated figures are marked `~` and dim, and
their source states the range. Colour carries meaning only (estimates dim, verdicts green/red).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvtier.engines.ledger import Ledger
from kvtier.report.concurrency import requests_caption, whole_requests
from kvtier.report.json_text import emit
from kvtier.report.plan_payload import advise_payload, plan_payload, refusal_payload

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from kvtier.engines.deployment import Deployment
    from kvtier.errors import DoesNotStart
    from kvtier.ledger.advise import Option
    from kvtier.ledger.target import TargetAnswer

ESTIMATED_MARK = "~"


def terminal() -> Console:
    """The console every view prints to: no automatic highlighting of numbers and strings."""
    from rich.console import Console

    return Console(highlight=False)


def gib_cell(gib: float, exact: bool) -> str:
    """A GiB figure to two decimals; an estimate is marked and dim."""
    return f"{gib:.2f}" if exact else f"[dim]{ESTIMATED_MARK}{gib:.2f}[/]"


def _tokens(ledger: Ledger) -> str:
    text = f"{ledger.kv_tokens:,}"
    if ledger.kv_tokens_range:
        low, high = ledger.kv_tokens_range
        text += f" (estimated, {low:,} - {high:,})"
    return text


def context_header(context: int) -> str:
    return f"@{context // 1024}k" if context % 1024 == 0 else f"@{context:,}"


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
        table.add_row(it.item, gib_cell(it.gib, it.exact), it.source)
    return table


def concurrency_table(ledger: Ledger) -> Table:
    from rich.table import Table

    cap = ledger.max_running_requests
    table = Table(
        title="requests the KV pool holds at once",
        caption=requests_caption(cap),
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("context (tokens)", justify="right")
    table.add_column("requests", justify="right")
    for c in ledger.concurrency:
        text = f"{whole_requests(c.requests, cap):,}"
        if c.low is not None and c.high is not None:
            text += f" [dim]({whole_requests(c.low, cap):,} - {whole_requests(c.high, cap):,})[/]"
        table.add_row(f"{c.context:,}", text)
    return table


def options_table(base: Ledger, options: Sequence[Option]) -> Table:
    """Ways to more KV capacity: GPU KV tokens and requests at once at each context length.

    Costs and engine flags follow the table (`print_option_details`), so that no flag is wrapped.
    """
    from rich.table import Table

    cap = base.max_running_requests
    contexts = [c.context for c in base.concurrency]
    table = Table(
        title="options (KV tokens: one rank's GPU pool)",
        caption=requests_caption(cap),
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("option", no_wrap=True)
    table.add_column("KV tokens", justify="right")
    for ctx in contexts:
        table.add_column(context_header(ctx), justify="right")
    table.add_row(
        "now",
        f"{base.kv_tokens:,}",
        *(f"{whole_requests(c.requests, cap):,}" for c in base.concurrency),
    )
    for opt in options:
        conc = dict(opt.concurrency)
        cells = [f"{whole_requests(conc[c], cap):,}" if c in conc else "-" for c in contexts]
        tokens = f"{opt.kv_tokens:,}" if opt.kv_tokens is not None else "-"
        table.add_row(opt.name, tokens, *cells)
    return table


def print_option_details(console: Console, options: Sequence[Option]) -> None:
    """Each option's cost or risk, then its engine flags on a line of their own (copy-paste)."""
    for opt in options:
        console.print(f"{opt.name}: {opt.cost}", markup=False)
        if opt.flags:
            console.print(f"  flags: {' '.join(opt.flags)}", markup=False, soft_wrap=True)


def render_ledger(ledger: Ledger, console: Console) -> None:
    console.print(f"{ledger.engine} {ledger.model} - {ledger.era}")
    console.print(ledger_table(ledger))
    console.print(
        f"KV tokens: {_tokens(ledger)}  ({ledger.kv_bytes_per_token:,} B per "
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
        console.print(f"  input {row.name}: {row.value}  ({row.origin})", markup=False)
    for note in ledger.notes:
        console.print(f"  note: {note}", markup=False)
    if not ledger.exact:
        console.print(
            f"  {ESTIMATED_MARK} estimated: pass the measured figures "
            "(--free-before-load-gib/--free-after-load-gib or --weights-gib ...) "
            "for exact numbers",
            markup=False,
        )


def quiet_lines(ledger: Ledger) -> list[str]:
    """The key figures as `key value` lines, plain numbers (no separators, GiB to 2 decimals)."""
    lines = [f"kv_tokens {ledger.kv_tokens}"]
    if ledger.kv_tokens_range:
        lines.append(f"kv_tokens_range {ledger.kv_tokens_range[0]} {ledger.kv_tokens_range[1]}")
    lines += [
        f"kv_bytes_per_token {ledger.kv_bytes_per_token}",
        f"kv_pool_gib {ledger.item('KV cache pool').gib:.2f}",
    ]
    cap = ledger.max_running_requests
    if cap is not None:
        lines.append(f"max_running_requests {cap}")
    if ledger.host_pool is not None:
        lines.append(f"host_pool_tokens {ledger.host_pool.tokens}")
    lines += [f"requests@{c.context} {whole_requests(c.requests, cap)}" for c in ledger.concurrency]
    return lines


def option_key(option: Option) -> str:
    """An option's name as one `--quiet` key: 'KV cache fp8_e4m3' -> 'kv_cache_fp8_e4m3'."""
    return re.sub(r"[^a-z0-9.]+", "_", option.name.lower()).strip("_")


def print_ledger(ledger: Ledger, as_json: bool = False, quiet: bool = False) -> None:
    if as_json:
        emit(plan_payload(ledger))
    elif quiet:
        print("\n".join(quiet_lines(ledger)))
    else:
        render_ledger(ledger, terminal())


def refusal_lines(deployment: Deployment, refusal: DoesNotStart, quiet: bool) -> list[str]:
    """What plan says of a deployment the engine would refuse to start."""
    tokens, rng, setting = refusal.tokens, refusal.tokens_range, refusal.would_start
    if quiet:
        lines = ["starts 0"]
        if tokens is not None:
            lines.append(f"kv_tokens {tokens}")
        if rng is not None:
            lines.append(f"kv_tokens_range {rng[0]} {rng[1]}")
        if setting is not None:
            lines.append(f"would_start {setting.flag} {setting.value:g}")
        return lines
    lines = [
        f"Does not start: {deployment.engine.value} would refuse {deployment.model}.",
        str(refusal),
    ]
    if tokens is not None:
        sized = f"KV tokens it sized before refusing: {tokens:,}"
        lines.append(sized + (f" (range {rng[0]:,} - {rng[1]:,})" if rng else ""))
    if setting is not None:
        lines.append(f"Starts with {setting.flag} {setting.value:g} ({setting.why}).")
    return lines


def print_refusal(
    deployment: Deployment, refusal: DoesNotStart, as_json: bool = False, quiet: bool = False
) -> None:
    if as_json:
        emit(refusal_payload(deployment, refusal))
    else:
        print("\n".join(refusal_lines(deployment, refusal, quiet)))


def print_advice(
    ledger: Ledger,
    options: Sequence[Option],
    answer: TargetAnswer | None,
    as_json: bool = False,
    quiet: bool = False,
) -> None:
    """The base ledger's key figures, the options table and the answer to a target, if asked."""
    if as_json:
        emit(advise_payload(ledger, options, answer))
        return
    if quiet:
        lines = quiet_lines(ledger)
        lines += [
            f"option.{option_key(o)} {o.kv_tokens if o.kv_tokens is not None else '-'}"
            for o in options
        ]
        if answer:
            lines.append(f"target_tokens_needed {answer.tokens_needed}")
            lines.append(f"target_option {option_key(answer.option) if answer.option else '-'}")
        print("\n".join(lines))
        return
    console = terminal()
    console.print(
        f"{ledger.engine} {ledger.model} on {ledger.gpus} x {ledger.gpu}: "
        f"KV tokens {_tokens(ledger)}, fraction {ledger.mem_fraction}"
    )
    console.print(options_table(ledger, options))
    print_option_details(console, options)
    if answer:
        console.print(
            f"target {answer.requests} x {answer.context:,} tokens "
            f"({answer.tokens_needed:,} needed): {answer.reason}",
            markup=False,
        )
        if answer.option and answer.option.flags:
            console.print(f"  flags: {' '.join(answer.option.flags)}", markup=False, soft_wrap=True)
