"""SGLang's `EngineRules`: what `kvtier.engines.rules.rules_for` hands out."""

from __future__ import annotations

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.host import HostTier
from kvtier.engines.interface import EngineRules
from kvtier.engines.sglang import (
    attention,
    builder,
    embedding,
    explain,
    hicache,
    lm_head,
    quantization,
    router,
)
from kvtier.engines.sglang.flags import FLAGS
from kvtier.model.description import ModelSpec


def _load_model(model: ModelSpec, d: Deployment) -> tuple[ModelSpec, str | None]:
    """The checkpoint under `--quantization`, then GLM's router in the release's dtype."""
    model, quantized = quantization.loaded_model(model, d.quantization)
    model, routed = router.loaded_router(model, d.engine_version)
    notes = [n for n in (quantized, routed) if n]
    return model, "; ".join(notes) or None


RULES = EngineRules(
    engine=Engine.SGLANG,
    flags=FLAGS,
    build_ledger=builder.build,
    rounded_measures=builder.rounded_measures,
    load_model=_load_model,
    explain=explain.EXPLAIN,
    host_tier=HostTier(hicache.host_tokens, hicache.check_host_ram),
    attention_ranks=attention.attention_ranks,
    embedding_ranks=embedding.embedding_ranks,
    lm_head_ranks=lm_head.lm_head_ranks,
)
