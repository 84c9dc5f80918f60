"""GLM-4's MoE router on SGLang: its weight in the model dtype through v0.5.18, float32 from
v0.5.19 (Glm4MoeGate / Glm4MoeLiteGate); the correction bias float32 in every release."""

from __future__ import annotations

import pytest

from kvtier.engines.sglang.router import loaded_router
from kvtier.model.catalog import resolve_model
from kvtier.model.params import ROUTER, ROUTER_FP32
from kvtier.model.weights import weight_bytes

# GLM-4.7: 92 layers, the first 3 dense, 160 experts over a hidden size of 5120, bfloat16
MOE_LAYERS, EXPERTS, HIDDEN = 89, 160, 5120


def _router_bytes(version: str | None) -> dict[str, int]:
    model, _ = loaded_router(resolve_model("glm-4.7"), version)
    names = (ROUTER, ROUTER_FP32)
    return {g.name: g.bytes_per_rank for g in weight_bytes(model, 8).groups if g.name in names}


@pytest.mark.parametrize("version", [None, "0.5.3", "0.5.18"])
def test_router_weight_in_the_model_dtype_before_0_5_19(version: str | None) -> None:
    assert _router_bytes(version) == {
        ROUTER: MOE_LAYERS * EXPERTS * HIDDEN * 2,
        ROUTER_FP32: MOE_LAYERS * EXPERTS * 4,
    }


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23", "main"])
def test_router_weight_in_float32_from_0_5_19(version: str) -> None:
    assert _router_bytes(version) == {ROUTER_FP32: MOE_LAYERS * (EXPERTS * HIDDEN + EXPERTS) * 4}


def test_parameter_count_is_unchanged_and_other_models_pass_through() -> None:
    glm = resolve_model("glm-4.7")
    model, note = loaded_router(glm, "0.5.9")
    assert model.total_params == glm.total_params and note is not None
    deepseek = resolve_model("deepseek-v3")
    assert loaded_router(deepseek, "0.5.9") == (deepseek, None)
