"""Recompute a logged KV pool with the engine's own ledger builder and say whether it matches.

The log's printed figures are measured inputs of the builder `kvtier plan` uses
(`kvtier.engines.<engine>.builder.build`), so explain, plan and the options it prices can never
disagree: `predicted.kv_tokens` is the builder's count and the options start from that ledger.
Printed figures carry two decimals, so the prediction is a range over their rounding: the
builder runs again at every corner of the printed values' half units, and a logged count inside
that range is a match.
"""

from __future__ import annotations

import dataclasses
import itertools

from kvtier.engines.deployment import Measured
from kvtier.engines.explain import LogInputs, Reconciliation
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.ledger import Ledger
from kvtier.engines.rules import rules_for
from kvtier.errors import KvtierError
from kvtier.ledger.plan import build_ledger, rounded_measures
from kvtier.ledger.release_row import release_row
from kvtier.logs.facts import Fact, stated
from kvtier.units import GiB

# Every GiB figure both engines print is formatted with two decimals (%.2f).
PRINTED_HALF_UNIT = 0.005


def token_range(plan: PlanInputs, halves: dict[str, float]) -> tuple[int, int]:
    """(low, high) KV tokens over every corner of the measured figures' rounding.

    `halves` maps a `Measured` figure by name (`free.after_load_gib` a record's) to the half unit
    its printed value was rounded to (or half the stated range of an estimated figure); a corner
    the engine would refuse (no memory left) counts as 0 tokens.
    """
    measured = plan.deployment.measured
    figures = {n: v for n in halves if (v := measured.value(n)) is not None}
    counts = []
    for signs in itertools.product((-1, 1), repeat=len(figures)):
        shifted = {
            n: v + sign * halves[n] for (n, v), sign in zip(figures.items(), signs, strict=True)
        }
        deployment = dataclasses.replace(plan.deployment, measured=measured.with_values(**shifted))
        corner = dataclasses.replace(plan, deployment=deployment)
        if "gpu_mem_gib" in shifted:  # the card the default rule reads (resolve's rounding)
            corner = dataclasses.replace(corner, gpu_mem_mib=round(shifted["gpu_mem_gib"] * 1024))
        try:
            counts.append(build_ledger(corner).kv_tokens)
        except KvtierError:
            counts.append(0)
    return min(counts), max(counts)


def reconcile(
    inp: LogInputs,
    plan: PlanInputs,
    halves: dict[str, float] | None = None,
    variants: tuple[PlanInputs, ...] = (),
    *,
    release: Fact[object] | None,
) -> Reconciliation:
    """Observed vs predicted KV tokens of a logged start: the builder's count over `plan`, the
    deployment the log describes with its figures as measured inputs; `release` is the engine
    release the log states (the `engine_version` fact of the engine's `measured`), if any.

    `halves` overrides the rounding of measured figures (default: every figure the engine's pool
    formula reads was printed with two decimals, and an estimated card its stated range).
    `variants` are the same deployment at the other ends of an uncertain input (a model's bytes
    per token read from the log); the range covers them too.
    """
    rules = rules_for(inp.engine).explain
    if halves is None:
        halves = dict.fromkeys(rounded_measures(plan.deployment), PRINTED_HALF_UNIT)
        halves.update(rules.rounding(inp))
    pinned = rules.pinned(inp)
    if pinned is not None:  # a flag set the count; no budget sized it
        return _unbuilt(inp, plan, pinned, release)
    try:
        ledger = _count_ledger(inp, plan)
    except KvtierError as exc:
        return _unbuilt(inp, plan, str(exc), release)
    low, high = ledger.kv_tokens, ledger.kv_tokens
    for variant in (plan, *variants):
        try:
            variant = _countable(inp, variant)
        except KvtierError:
            continue
        lo, hi = token_range(variant, halves)
        low, high = min(low, lo), max(high, hi)
    if ledger.kv_tokens_range is not None:  # inputs the builder estimated from the spec
        low, high = min(low, ledger.kv_tokens_range[0]), max(high, ledger.kv_tokens_range[1])
    notes = list(inp.notes)
    if ledger.range_why:
        notes.append(ledger.range_why)
    high = _unaligned_top(inp, plan, high, notes)
    if inp.failure is not None and inp.observed is None:
        notes.append(f"kvtier's builder at the log's figures: {ledger.kv_tokens:,} tokens")
    return _reconciled(
        inp,
        (inp.observed, ledger.kv_tokens, low, high),
        (*_memory_rows(inp, ledger), *_common_rows(inp, ledger), release_row(inp, plan, release)),
        ledger,
        kv_bytes_per_token=ledger.kv_bytes_per_token,
        kv_dtype=plan.kv_dtype(),
        page_size=ledger.page_size,
        formula=ledger.pool_formula,
        notes=tuple(notes),
        warnings=_geometry_warning(inp, ledger),
        stages=bool(ledger.range_why),
    )


def _reconciled(
    inp: LogInputs,
    counts: tuple[Fact[int] | None, int, int, int],
    inputs: tuple[tuple[str, Fact[object]], ...],
    ledger: Ledger | None,
    *,
    kv_bytes_per_token: int,
    kv_dtype: KVDtype,
    page_size: int,
    formula: str,
    notes: tuple[str, ...],
    warnings: tuple[str, ...] = (),
    unchecked: str | None = None,
    stages: bool = False,
) -> Reconciliation:
    """`inp`'s start as the log names it, its (observed, predicted, low, high) token counts, the
    rows of `inputs` then those the log's reader estimated, the builder's `ledger` (None: it
    could not run) and its figures; `warnings` follow the log reader's own."""
    return Reconciliation(
        inp.engine.value,
        inp.model,
        inp.model_source,
        *counts,
        kv_bytes_per_token=kv_bytes_per_token,
        kv_dtype=kv_dtype,
        page_size=page_size,
        inputs=inputs + tuple(inp.estimated),
        formula=formula,
        warnings=tuple(inp.warnings) + warnings,
        notes=notes,
        ledger=ledger,
        failure=inp.failure,
        unchecked=unchecked,
        estimated=tuple(name for name, _ in inp.estimated),
        stages=stages,
    )


def _countable(inp: LogInputs, plan: PlanInputs) -> PlanInputs:
    """The plan whose pool the log's count is: a start refused for a too-long max_model_len
    still sized the pool, so its count is taken at a one-block context."""
    if inp.failure is None or plan.deployment.context_length is None:
        return plan
    try:
        build_ledger(plan)
        return plan
    except KvtierError:
        page = plan.deployment.page_size or inp.page_size.value
        shorter = dataclasses.replace(plan.deployment, context_length=page)
        return dataclasses.replace(plan, deployment=shorter)


def _count_ledger(inp: LogInputs, plan: PlanInputs) -> Ledger:
    return build_ledger(_countable(inp, plan))


def _unaligned_top(inp: LogInputs, plan: PlanInputs, high: int, notes: list[str]) -> int:
    """vLLM prints int(max_concurrency x max_model_len) for hybrid models (v0.21+,
    _report_kv_cache_config), not whole blocks; with a log-derived geometry the engine's grouping
    is unknown, so the range's top is the unaligned count the budget holds."""
    observed, geometry = inp.observed, inp.geometry
    available = plan.deployment.measured.profile.kv_available_gib
    if inp.model_known or geometry is None or observed is None or available is None:
        return high
    if observed.value % inp.page_size.value == 0:
        return high
    top = int((available + PRINTED_HALF_UNIT) * GiB // geometry.low)
    notes.append(
        f"the logged count {observed.value:,} is not whole blocks of {inp.page_size.value} "
        "(vLLM prints int(max_concurrency x max_model_len) for hybrid models); the range's "
        f"top is the unaligned count {top:,}"
    )
    return max(high, top)


def _geometry_warning(inp: LogInputs, ledger: Ledger) -> tuple[str, ...]:
    """The budget bytes a logged token stands for under the model (`Ledger.count_cell`: its KV
    bytes per token, or what the engine's grouped count makes of them) outside what the log's
    budget and count allow. Where the engine states no such figure, not for a model whose other
    layers keep state (state pages share the budget) nor one of two KV shapes (two pools price
    a token per layer type): the predicted count is checked against the log's instead."""
    geometry, kv = inp.geometry, inp.model.kv
    if not inp.model_known or geometry is None:
        return ()
    if ledger.logged_token_bytes is None and (kv.linear is not None or not kv.is_uniform):
        return ()
    if geometry.fits(ledger.count_cell):
        return ()
    return (
        f"{inp.model.model_id} {cell_words(ledger)}, but the log's figures allow "
        f"{geometry.low:,}-{geometry.high:,} ({geometry.how}, {geometry.line.where}): check "
        "--model, --tp and --kv-cache-dtype",
    )


def cell_words(ledger: Ledger) -> str:
    """What one logged token takes under `ledger`, for a check against the log's geometry."""
    words = f"takes {ledger.kv_bytes_per_token:,} B of KV per token per GPU"
    if ledger.count_cell == ledger.kv_bytes_per_token:
        return words
    return f"{words} and {ledger.count_cell:,} B of the budget per logged token"


def _unbuilt(
    inp: LogInputs, plan: PlanInputs, why: str, release: Fact[object] | None
) -> Reconciliation:
    """A start whose pool the builder cannot recompute: a refusal, or a log without figures."""
    observed = inp.observed
    if inp.failure is None and observed is None:
        raise KvtierError(f"cannot recompute the KV pool: {why}")
    notes = list(inp.notes)
    unchecked = None
    if inp.failure is not None:
        notes.append(f"kvtier's builder at the log's figures: {why}")
        predicted = observed.value if observed is not None else 0
    else:
        assert observed is not None
        why = _explain_needs(inp, plan, why)
        unchecked = f"the log lacks the figures to recompute it ({why})"
        predicted = observed.value
    geometry = inp.geometry
    cell = geometry.bytes_per_token if geometry is not None else 0
    rows: list[tuple[str, Fact[object]]] = [("model", inp.model_source)]
    rows += [
        (rules_for(inp.engine).explain.page_name, inp.page_size),
        release_row(inp, plan, release),
    ]
    return _reconciled(
        inp,
        (observed, predicted, predicted, predicted),
        tuple(rows),
        None,
        kv_bytes_per_token=cell,
        kv_dtype=inp.kv_dtype,
        page_size=inp.page_size.value,
        formula="not recomputed: " + why,
        notes=tuple(notes),
        unchecked=unchecked,
    )


def _explain_needs(inp: LogInputs, plan: PlanInputs, why: str) -> str:
    """Why a count-only log gets no count or range, in the flags explain takes: the builder
    names plan's measured-figure flags (--free-before-load-gib, --weights-gib), which explain
    refuses because the log states the deployment; without the log's memory lines the pool is
    estimated from the card and the model's weights, so those are what it lacks."""
    if inp.memory is not None:
        return why
    needs = []
    if plan.gpu_mem_mib is None:
        needs.append("the card's memory (--gpu or --gpu-mem-gib)")
    if not inp.model_known:
        needs.append("the model's weights (--model: a catalog id or a folder with its config.json)")
    if not needs:
        return why
    return (
        "the log prints no memory figure the pool was sized from, and kvtier cannot estimate "
        f"them without {' and '.join(needs)}, so neither a count nor a range is recomputed"
    )


def _memory_rows(inp: LogInputs, ledger: Ledger) -> list[tuple[str, Fact[object]]]:
    rows = rules_for(inp.engine).explain.memory_rows(inp, ledger)
    if rows:
        return rows
    return [
        ("memory figures", stated("estimated", "estimated by kvtier plan: " + _estimates(ledger)))
    ]


def _estimates(ledger: Ledger) -> str:
    return "; ".join(f"{i.item} {i.gib:.2f} GiB ({i.source})" for i in ledger.items if not i.exact)


def _common_rows(inp: LogInputs, ledger: Ledger) -> list[tuple[str, Fact[object]]]:
    rules = rules_for(inp.engine).explain
    return [
        ("model", inp.model_source),
        ("tensor parallel (attention)", inp.attn_tp),
        ("kv cache dtype", _kv_dtype_row(inp, ledger)),
        (rules.page_name, inp.page_size),
        ("bytes per token per GPU", stated(ledger.kv_bytes_per_token, rules.cell_rule)),
    ]


def _kv_dtype_row(inp: LogInputs, ledger: Ledger) -> Fact[object]:
    """The KV dtype as the log states it; an unprinted `auto` as the builder resolved it."""
    if inp.kv_dtype_auto and inp.model_known:
        row = next((i for i in ledger.inputs if i.name == "kv cache dtype"), None)
        if row is not None:
            return stated(row.value, row.origin)
    return inp.kv_dtype_source


__all__ = ["PRINTED_HALF_UNIT", "Measured", "reconcile", "token_range"]
