"""kvtier's side of a vLLM oracle case: the case's model and deployment, planned as `plan` would."""

from __future__ import annotations

from typing import Any

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Ledger
from kvtier.engines.vllm import builder
from kvtier.model.description import KVGeometry, ModelSpec

NAME = "oracle/model"


def model(
    architecture: str, kv: KVGeometry, layers: int, width: tuple[int, int, int], dtype: str
) -> ModelSpec:
    """A model of `layers` layers with attention `kv`; `width` is hidden size, attention heads,
    vocabulary."""
    hidden, heads, vocab = width
    return ModelSpec(NAME, architecture, kv, layers, hidden, heads, vocab, 1 << 20, dtype, None, ())


def plan(case: dict[str, Any], version: str, spec: ModelSpec, **deployment: Any) -> Ledger:
    """vLLM `version` given the case's memory, block, context and batch, and `deployment`."""
    d = Deployment(
        Engine.VLLM,
        NAME,
        kv_cache_memory_bytes=case["available"],
        page_size=case["block"],
        context_length=case["max_model_len"],
        chunked_prefill_size=case["batched"],
        engine_version=version,
        **deployment,
    )
    return builder.build(PlanInputs(d, spec, None, None, None, ""))


def concurrency(ledger: Ledger, case: dict[str, Any]) -> float:
    """The requests of the case's max_model_len that fit at once."""
    (requests,) = [c.requests for c in ledger.concurrency if c.context == case["max_model_len"]]
    return requests
