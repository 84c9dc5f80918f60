"""The dtype SGLang holds GLM-4's MoE router weight in, by release.

`Glm4MoeGate` (models/glm4_moe.py) and `Glm4MoeLiteGate` (models/glm4_moe_lite.py) build their
weight in the default (model) dtype in v0.5.3 - v0.5.18 and in torch.float32 from v0.5.19; the
`e_score_correction_bias` beside it is float32 in every release. The spec counts both in float32
(`ROUTER_FP32`, as vLLM v0.10.2 - v0.21.0 builds them), so an older SGLang release gets the
weight back in the model dtype. No version is v0.5.9, the default era.
"""

from __future__ import annotations

import dataclasses

from kvtier.engines.sglang import versions
from kvtier.engines.sglang.versions import V0_5_19
from kvtier.model.description import ModelSpec, ParamGroup
from kvtier.model.params import ROUTER, ROUTER_FP32


def loaded_router(model: ModelSpec, version: str | None) -> tuple[ModelSpec, str | None]:
    """`model` with its float32 router as `version` loads it, and what changed (None: nothing)."""
    v = versions.DEFAULT.resolve(version)
    fp32 = [g for g in model.params if g.name == ROUTER_FP32]
    if not fp32 or v >= V0_5_19:
        return model, None
    (group,) = fp32
    # one weight of experts x hidden and one bias of experts per MoE layer
    bias = group.count // (model.hidden_size + 1)
    weight = ParamGroup(ROUTER, group.count - bias, group.count - bias, False, False)
    params: list[ParamGroup] = []
    for g in model.params:
        params += [weight, dataclasses.replace(g, count=bias, active=bias)] if g is group else [g]
    note = "GLM router weight in the model dtype (Glm4MoeGate / Glm4MoeLiteGate before v0.5.19)"
    return dataclasses.replace(model, params=tuple(params)), note
