"""Recompute a logged KV pool with the engine's own ledger builder and say whether it matches.

The log's printed figures are measured inputs of the builder `kvtier plan` uses
(`kvtier.engines.<engine>.ledger.build`), so explain, plan and the options it prices can never
disagree: `predicted.kv_tokens` is the builder's count and the options start from that ledger.
Printed figures carry two decimals, so the prediction is a range over their rounding: the
builder runs again at every corner of the printed values' half units, and a logged count inside
that range is a match.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from kvtier.engines.deployment import Engine, Measured
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.ledger import Ledger
from kvtier.errors import KvtierError
from kvtier.ledger.log_inputs import LogInputs
from kvtier.ledger.plan import build_ledger, rounded_measures
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
    ledger: Ledger  # the builder's ledger from the log's figures; options are priced on it

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


def token_range(plan: PlanInputs, halves: dict[str, float]) -> tuple[int, int]:
    """(low, high) KV tokens over every corner of the measured figures' rounding.

    `halves` maps a `Measured` field to the half unit its printed value was rounded to; a corner
    the engine would refuse (no memory left) counts as 0 tokens.
    """
    measured = plan.deployment.measured
    names = [n for n in halves if getattr(measured, n) is not None]
    counts = []
    for signs in itertools.product((-1, 1), repeat=len(names)):
        shifted = {
            n: getattr(measured, n) + sign * halves[n] for n, sign in zip(names, signs, strict=True)
        }
        deployment = dataclasses.replace(
            plan.deployment, measured=dataclasses.replace(measured, **shifted)
        )
        try:
            counts.append(build_ledger(dataclasses.replace(plan, deployment=deployment)).kv_tokens)
        except KvtierError:
            counts.append(0)
    return min(counts), max(counts)


def reconcile(
    inp: LogInputs, plan: PlanInputs, halves: dict[str, float] | None = None
) -> Reconciliation:
    """Observed vs predicted KV tokens of a logged start: the builder's count over `plan`, the
    deployment the log describes with its figures as measured inputs.

    `halves` overrides the rounding of measured figures (default: every figure the engine's pool
    formula reads was printed with two decimals).
    """
    ledger = build_ledger(plan)
    if halves is None:
        halves = dict.fromkeys(rounded_measures(plan.deployment), PRINTED_HALF_UNIT)
    low, high = token_range(plan, halves)
    low, high = min(low, ledger.kv_tokens), max(high, ledger.kv_tokens)
    return Reconciliation(
        engine=inp.engine.value,
        model=inp.model,
        model_source=inp.model_source,
        observed=inp.observed,
        predicted=ledger.kv_tokens,
        predicted_low=low,
        predicted_high=high,
        kv_bytes_per_token=ledger.kv_bytes_per_token,
        kv_dtype=plan.kv_dtype(),
        page_size=ledger.page_size,
        inputs=tuple(_memory_rows(inp, ledger) + _common_rows(inp, ledger)),
        formula=ledger.pool_formula,
        warnings=tuple(inp.warnings),
        notes=tuple(inp.notes),
        ledger=ledger,
    )


def _memory_rows(inp: LogInputs, ledger: Ledger) -> list[tuple[str, Fact[object]]]:
    if inp.sglang is not None:
        s = inp.sglang
        fraction: Fact[object] = (
            s.fraction
            if s.fraction is not None
            else stated(ledger.mem_fraction, _input_origin(ledger, "mem_fraction_static"))
        )
        return [
            ("free before load (GiB, min over ranks)", s.free_before),
            ("free after load (GiB, min over ranks)", s.free_after),
            ("mem_fraction_static", fraction),
        ]
    assert inp.vllm is not None
    return [("available KV (GiB)", inp.vllm.available)]


def _common_rows(inp: LogInputs, ledger: Ledger) -> list[tuple[str, Fact[object]]]:
    how = (
        "SGLang cell size (get_cell_size_per_token)"
        if inp.engine is Engine.SGLANG
        else "vLLM page bytes (real_page_size_bytes) x layers / block size"
    )
    return [
        ("model", inp.model_source),
        ("tensor parallel (attention)", inp.attn_tp),
        ("kv cache dtype", inp.kv_dtype_source),
        ("page size" if inp.engine is Engine.SGLANG else "block size", inp.page_size),
        ("bytes per token per GPU", stated(ledger.kv_bytes_per_token, how)),
    ]


def _input_origin(ledger: Ledger, name: str) -> str:
    return next((i.origin for i in ledger.inputs if i.name == name), "default")


__all__ = ["PRINTED_HALF_UNIT", "Measured", "Reconciliation", "reconcile", "token_range"]
