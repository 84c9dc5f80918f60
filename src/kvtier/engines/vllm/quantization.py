"""vLLM's `--quantization` words (engines/quantization.py applies them).

Online fp8: `fp8` on a checkpoint without a quantization_config, `fp8_per_tensor` from v0.20
(`Fp8Config(is_checkpoint_fp8_serialized=False)`: `Fp8OnlineLinearMethod`, `Fp8OnlineMoEMethod`;
model_executor/layers/quantization/fp8.py, v0.6.4 - v0.21.0). The overrides that read a
checkpoint: `ModelConfig._verify_quantization` (config/model.py, v0.21.0).
"""

from __future__ import annotations

from kvtier.engines import quantization
from kvtier.model.description import ModelSpec

NAMES = quantization.QuantizationNames(
    engine="vLLM",
    release="v0.21",
    # QuantizationMethods (model_executor/layers/quantization/__init__.py, v0.21.0)
    methods=(
        "awq",
        "fp8",
        "fbgemm_fp8",
        "fp_quant",
        "modelopt",
        "modelopt_fp4",
        "modelopt_mxfp8",
        "modelopt_mixed",
        "gguf",
        "gptq_marlin",
        "awq_marlin",
        "gptq",
        "humming",
        "compressed-tensors",
        "bitsandbytes",
        "experts_int8",
        "quark",
        "moe_wna16",
        "torchao",
        "inc",
        "mxfp4",
        "gpt_oss_mxfp4",
        "deepseek_v4_fp8",
        "cpu_awq",
        "online",
        "fp8_per_tensor",
        "fp8_per_block",
        "int8_per_channel_weight_only",
        "mxfp8",
    ),
    online_fp8=frozenset({"fp8", "fp8_per_tensor"}),
    checkpoint={
        "fp8": frozenset(
            {
                "fp8",
                "fbgemm_fp8",
                "compressed-tensors",
                "modelopt",
                "modelopt_mixed",
                "deepseek_v4_fp8",
            }
        ),
        "nvfp4": frozenset({"modelopt_fp4", "modelopt_mixed", "compressed-tensors"}),
        "mxfp4": frozenset({"mxfp4", "gpt_oss_mxfp4", "quark"}),
        "awq": frozenset({"awq", "awq_marlin", "moe_wna16", "cpu_awq", "inc"}),
        "gptq": frozenset({"gptq", "gptq_marlin", "moe_wna16", "inc"}),
    },
)


def loaded_model(model: ModelSpec, method: str | None) -> tuple[ModelSpec, str | None]:
    """The model as vLLM loads it under `--quantization method`, and what the flag did."""
    return quantization.loaded_model(model, method, NAMES)
