"""Recompute a logged KV pool from the log's own inputs and say whether it matches.

SGLang (`profile_max_num_token`, Eras A/B; `KVCacheConfigurator._profile_available_bytes`, C):
    tokens = int((free_after_load - free_before_load x (1 - mem_fraction_static)) x 2^30) // cell
    aligned down to the page size, where both free figures are the MIN over ranks.
vLLM (V1 `kv_cache_utils.get_num_blocks`; V0 `determine_num_available_blocks`):
    tokens = floor(available_kv_bytes / (block_size x bytes_per_token)) x block_size
Printed figures carry two decimals, so the prediction is a range over their rounding; a logged
count inside that range is a match.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvtier.engines.deployment import Engine
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.sglang import pool as sglang_budget
from kvtier.engines.vllm import pool as vllm_budget
from kvtier.ledger.log_inputs import LogInputs
from kvtier.logs.facts import Fact, stated
from kvtier.spec.model import ModelSpec

# Every GiB figure both engines print is formatted with two decimals (%.2f).
PRINTED_HALF_UNIT = 0.005


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """Observed vs recomputed KV tokens of one logged start, with every input's provenance."""

    engine: str
    model: ModelSpec
    model_source: Fact[str]
    observed: Fact[int]
    predicted: int
    predicted_low: int
    predicted_high: int
    kv_bytes_per_token: int  # one GPU (rank), all its layers
    kv_dtype: KVDtype
    page_size: int
    inputs: tuple[tuple[str, Fact[object]], ...]
    formula: str
    warnings: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def difference(self) -> int:
        return self.predicted - self.observed.value

    @property
    def relative_difference(self) -> float:
        return self.difference / self.observed.value if self.observed.value else 0.0

    @property
    def matches(self) -> bool:
        return self.predicted_low <= self.observed.value <= self.predicted_high

    @property
    def verdict(self) -> str:
        if self.matches:
            return "match: within the rounding of the printed figures"
        return (
            f"mismatch: {self.relative_difference:+.2%} outside the rounding of the printed figures"
        )


def reconcile(inputs: LogInputs) -> Reconciliation:
    """Observed vs predicted KV tokens of a logged start, from its resolved inputs."""
    if inputs.engine is Engine.SGLANG:
        return _sglang(inputs)
    return _vllm(inputs)


def _spread(
    formula: Callable[..., int], values: Sequence[float], halves: Sequence[float]
) -> tuple[int, int, int]:
    """(nominal, low, high) of `formula` over every corner of the printed values' rounding."""
    nominal = formula(*values)
    corners = [
        formula(*(v + sign * h for v, h, sign in zip(values, halves, signs, strict=True)))
        for signs in itertools.product((-1, 1), repeat=len(values))
    ]
    return nominal, min(corners), max(corners)


def _sglang(inp: LogInputs) -> Reconciliation:
    s = inp.sglang
    assert s is not None
    cell = sglang_budget.cell_size(inp.model.kv, inp.attn_tp.value, inp.layers, inp.kv_dtype)
    page, cap = inp.page_size.value, s.max_total_tokens
    fraction = s.fraction.value

    def tokens(after: float, before: float) -> int:
        rest = sglang_budget.rest_gib(before, after, fraction)
        if rest <= 0:
            return 0
        count = sglang_budget.profile_tokens(rest, cell, page, cap)
        if inp.model.kv.is_hybrid:
            ratio = sglang_budget.SWA_FULL_TOKENS_RATIO
            return sglang_budget.hybrid_swa_tokens(
                count, inp.model.kv, inp.attn_tp.value, page, ratio
            ).full_tokens
        return count

    # An inferred free-before-load is the sum of two printed figures: twice the rounding.
    before_half = PRINTED_HALF_UNIT * (2 if s.before_inferred else 1)
    nominal, low, high = _spread(
        tokens, (s.free_after.value, s.free_before.value), (PRINTED_HALF_UNIT, before_half)
    )
    formula = (
        f"int(({s.free_after.value:.2f} - {s.free_before.value:.2f} x (1 - {fraction})) GiB x 2^30)"
        f" // {cell} B/token, aligned down to page {page}"
    )
    rows: list[tuple[str, Fact[object]]] = [
        ("free before load (GiB, min over ranks)", s.free_before),
        ("free after load (GiB, min over ranks)", s.free_after),
        ("mem_fraction_static", s.fraction),
    ]
    return _result(inp, cell, nominal, low, high, formula, rows)


def _vllm(inp: LogInputs) -> Reconciliation:
    v = inp.vllm
    assert v is not None
    per_token = inp.bytes_per_token
    block = inp.page_size.value

    def tokens(available_gib: float) -> int:
        # a block of all layers is `block` tokens of `per_token` bytes: one "layer" of that page
        return vllm_budget.blocks_in_gib(available_gib, per_token * block, 1) * block

    nominal, low, high = _spread(tokens, (v.available.value,), (PRINTED_HALF_UNIT,))
    formula = (
        f"floor({v.available.value:.2f} GiB x 2^30 / ({block} x {per_token} B/token)) x {block}"
    )
    return _result(
        inp, per_token, nominal, low, high, formula, [("available KV (GiB)", v.available)]
    )


def _result(
    inp: LogInputs,
    per_token: int,
    nominal: int,
    low: int,
    high: int,
    formula: str,
    rows: list[tuple[str, Fact[object]]],
) -> Reconciliation:
    common: list[tuple[str, Fact[object]]] = [
        ("model", inp.model_source),
        ("tensor parallel (attention)", inp.attn_tp),
        ("kv cache dtype", inp.kv_dtype_source),
        ("page size" if inp.engine is Engine.SGLANG else "block size", inp.page_size),
        ("bytes per token per GPU", stated(per_token, inp.bytes_per_token_how)),
    ]
    return Reconciliation(
        engine=inp.engine.value,
        model=inp.model,
        model_source=inp.model_source,
        observed=inp.observed,
        predicted=nominal,
        predicted_low=low,
        predicted_high=high,
        kv_bytes_per_token=per_token,
        kv_dtype=inp.kv_dtype,
        page_size=inp.page_size.value,
        inputs=tuple(rows + common),
        formula=formula,
        warnings=tuple(inp.warnings),
        notes=tuple(inp.notes),
    )
