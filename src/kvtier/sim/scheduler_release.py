"""The release each simulated scheduler was read in: SGLang's (sim/servers/sglang*.py) in
v0.5.23, vLLM's (sim/servers/vllm*.py) in v0.32.0. A deployment stating an older release runs
that model all the same, noted: its ledger (pool and tiers) follows the stated release."""

from __future__ import annotations

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.rules import release_default
from kvtier.engines.sglang.versions import V0_5_23
from kvtier.engines.vllm.versions import V0_32

READ_IN = {Engine.SGLANG: V0_5_23, Engine.VLLM: V0_32}


def older_release_note(d: Deployment) -> list[str]:
    """One note when `d` states a release before the one its scheduler model was read in."""
    if d.engine_version is None:
        return []
    default, read = release_default(d.engine), READ_IN[d.engine]
    version = default.resolve(d.engine_version)
    if version >= read:
        return []
    return [
        f"the scheduler model follows {default.engine} v{read}, the release it was read in; the "
        f"deployment states {default.engine} {version}, an older one (the KV pool and tiers "
        f"follow {version}'s rules)"
    ]
