"""The memory section: one GPU as a stacked bar of ledger items, reserve and free bracketed.

Two ledger shapes arrive. `plan` / `advise` list a partition of the card, in the order memory is
taken. `explain` tags each row with a `part`: "card" rows, the "reserve" (a span, not a piece),
"from reserve" rows and the "free" rest. One card row may be the whole the other pieces add up to
(SGLang: the free memory before load, the fraction's base; the log has no card total); a row
tagged "total" is that whole, a row tagged "note" overlaps others and is listed only. When no
row is the sum of the others, the rows overlap in ways the report cannot know, and no bar is
drawn: the table lists them.

    |------------------ whole: free before load (explain) or the card (plan) ------------------|
    | weights ...              | KV pool | with pool | from reserve ... | free                |
                                         |<--------- reserve: (1 - fraction) x base --------->|
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from kvtier.errors import KvtierError
from kvtier.report.charts import HATCHED, PALETTE, Bracket, Segment, stacked_bar
from kvtier.report.explain_payload import ExplainPayload
from kvtier.report.html_parts import Section, figure, source_text, table
from kvtier.report.plan_payload import AdvisePayload, LedgerRow

if TYPE_CHECKING:
    from kvtier.report.payloads import LedgerPayload

KV_POOL_ITEM = "KV cache pool"  # the plan ledger's name for the target model's KV pool
BASE_TOLERANCE_GIB = 0.05  # the log prints GB to two decimals; a few rounded terms add up to this


def is_free(row: LedgerRow) -> bool:
    return row.part == "free" or row.item.lower().startswith("free")


def find_base(rows: list[LedgerRow]) -> LedgerRow | None:
    """The row the other rows add up to: tagged "total", or a card row that sums the rest."""
    for row in rows:
        if row.part == "total":
            return row
    for row in rows:
        if row.part != "card":
            continue
        rest = sum(r.gib for r in rows if r is not row)
        if abs(row.gib - rest) <= BASE_TOLERANCE_GIB:
            return row
    return None


def reserve_bracket(
    payload: LedgerPayload, ledger: list[LedgerRow], total: float
) -> Bracket | None:
    """The engine's reserve, stated by the ledger, or for a plan what follows SGLang's KV pool.

    SGLang sizes the pool as free_after - free_before x (1 - fraction), so everything a plan
    lists after the pool (draft, request table, graphs, free) is that reserve plus page rounding.
    """
    stated = [r for r in ledger if r.part == "reserve"]
    if stated:
        gib = stated[0].gib
        return Bracket(f"{stated[0].item}: {gib:.2f} GiB", total - gib, total)
    if isinstance(payload, ExplainPayload):  # a log's reserve is a row when the log sizes it
        return None
    plan = payload.plan if isinstance(payload, AdvisePayload) else payload
    names = [r.item for r in ledger]
    if plan.engine != "sglang" or KV_POOL_ITEM not in names:
        return None
    gib = sum(r.gib for r in ledger[names.index(KV_POOL_ITEM) + 1 :])
    label = f"reserve {gib:.2f} GiB = (1 - {plan.mem_fraction:g}) x free before load"
    return Bracket(label, total - gib, total)


def memory_section(kind: str, payload: LedgerPayload) -> Section:
    """Per-GPU stacked bar of every ledger item, the engine's reserve and the free memory."""
    explained = payload if isinstance(payload, ExplainPayload) else None
    plan = payload.plan if isinstance(payload, AdvisePayload) else payload
    ledger = list(plan.ledger)
    if not ledger:
        raise KvtierError(f"report: the {kind} ledger is empty")
    rows = [
        [
            ("  " if r.part == "from reserve" else "") + r.item,
            f"{r.gib:.2f}",
            "exact" if r.exact else "estimate",
            source_text(r.source),
        ]
        for r in ledger
    ]
    listing = table(["item", "GiB", "", "source"], rows, "ledger")
    if explained is not None and explained.answer:
        listing += f'<p class="answer">{escape(explained.answer)}</p>'
    pieces = [r for r in ledger if r.part not in ("reserve", "note")]
    base = find_base(pieces)
    if base is None and any(r.part is not None for r in ledger):
        note = "<p>These rows overlap (no row is the sum of the others), so no bar is drawn.</p>"
        return Section(f"{kind}-memory", "Memory per GPU", note + listing)
    negative = [r for r in pieces if r.gib < 0]  # measurement noise; listed, not drawn
    pieces = [r for r in pieces if r is not base and r.gib >= 0]
    if not any(r.gib > 0 for r in pieces):
        raise KvtierError(f"report: the {kind} ledger has no memory to draw")
    segments = [
        Segment(r.item, r.gib, HATCHED if is_free(r) else PALETTE[i % (len(PALETTE) - 1)])
        for i, r in enumerate(pieces)
    ]
    total = sum(s.value for s in segments)  # the base, to the rounding of the printed terms
    brackets = [b for b in (reserve_bracket(payload, ledger, total),) if b is not None]
    free_gib = sum(s.value for s in segments if s.hatched)
    if free_gib > 0:
        label = f"free, unused by the engine: {free_gib:.2f} GiB"
        brackets.append(Bracket(label, total - free_gib, total))
    whole = f"{base.item} = {base.gib:.2f} GiB" if base else f"{total:.2f} GiB"
    heading = f"Memory of one GPU: {whole}"
    svg = stacked_bar(segments, title=heading, unit="GiB", brackets=brackets)
    svg += zoom_bar(segments, brackets, total)
    caption = (
        "One GPU's memory in GiB (2^30 bytes), left to right in the order the engine takes it."
    )
    if base:
        caption += f" The bar spans {base.item}, which the items drawn add up to."
    if negative:
        listed = "; ".join(f"{r.item} {r.gib:.2f} GiB" for r in negative)
        caption += f" Negative, so not drawn: {listed}."
    missing = explained.not_in_log if explained is not None else ()
    if missing:
        listed = "; ".join(f"{m.item} ({m.why})" for m in missing)
        caption += f" Not sized by the log, so inside the free part: {listed}."
    return Section(f"{kind}-memory", "Memory per GPU", figure(heading, svg, caption) + listing)


def zoom_bar(segments: list[Segment], brackets: list[Bracket], total: float) -> str:
    """The largest item (the weights) dwarfs the rest: draw what follows it at its own scale."""
    largest = max(range(len(segments)), key=lambda i: segments[i].value)
    after = segments[largest + 1 :]
    if len(after) < 2:
        return ""
    rest = sum(s.value for s in after)
    shift = total - rest
    shown = [
        Bracket(b.label, max(b.start - shift, 0.0), b.end - shift)
        for b in brackets
        if b.start >= shift - BASE_TOLERANCE_GIB * 4
    ]
    label = segments[largest].label
    zoom = stacked_bar(after, title=f"After {label}", unit="GiB", brackets=shown)
    return f'<p class="zoom-title">Zoom: the {rest:.2f} GiB after the {escape(label)}</p>{zoom}'
