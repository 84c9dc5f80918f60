"""Each engine's rules behind one interface: `rules_for(Engine.SGLANG)` / `rules_for(Engine.VLLM)`.

Each engine implements `EngineRules` (engines/interface.py) in one package, `engines/<engine>/`,
and nothing outside that package computes an engine's number.
"""

from __future__ import annotations

from kvtier.engines.deployment import Engine
from kvtier.engines.interface import EngineRules
from kvtier.engines.version import Default


def rules_for(engine: Engine) -> EngineRules:
    # imported on first use: a command about one engine never loads the other's rules
    if engine is Engine.SGLANG:
        from kvtier.engines.sglang.rules import RULES as SGLANG

        return SGLANG
    from kvtier.engines.vllm.rules import RULES as VLLM

    return VLLM


def release_default(engine: Engine) -> Default:
    """The release whose rules apply to `engine` where no version is given (`versions.DEFAULT`)."""
    if engine is Engine.SGLANG:
        from kvtier.engines.sglang.versions import DEFAULT as SGLANG

        return SGLANG
    from kvtier.engines.vllm.versions import DEFAULT as VLLM

    return VLLM
