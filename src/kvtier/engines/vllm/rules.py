"""vLLM's `EngineRules`: what `kvtier.engines.rules.rules_for` hands out."""

from __future__ import annotations

from kvtier.engines.deployment import Engine
from kvtier.engines.interface import EngineRules
from kvtier.engines.vllm import builder, explain, quantization
from kvtier.engines.vllm.flags import FLAGS

RULES = EngineRules(
    engine=Engine.VLLM,
    flags=FLAGS,
    build_ledger=builder.build,
    rounded_measures=builder.rounded_measures,
    load_model=lambda model, d: quantization.loaded_model(model, d.quantization),
    explain=explain.EXPLAIN,
)
