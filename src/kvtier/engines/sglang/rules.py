"""SGLang's `EngineRules`: what `kvtier.engines.rules.rules_for` hands out."""

from __future__ import annotations

from kvtier.engines.deployment import Engine
from kvtier.engines.rules import EngineRules
from kvtier.engines.sglang import ledger, log, pool, quantization
from kvtier.engines.sglang.flags import FLAGS

RULES = EngineRules(
    engine=Engine.SGLANG,
    flags=FLAGS,
    era_label=lambda version: pool.era_for(version).label,
    build_ledger=ledger.build,
    rounded_measures=ledger.rounded_measures,
    parse_startup=log.parse_sglang,
    load_model=lambda model, d: quantization.loaded_model(model, d.quantization),
)
