"""SGLang's `--quantization` words (engines/quantization.py applies them).

Online fp8: `fp8` on a checkpoint without a quantization config loads with `Fp8Config()`
(model_loader/weight_utils.py get_quant_config: `quant_cls()` when no config file names one),
whose get_quant_method quantizes `LinearBase` and `FusedMoE` (srt/layers/quantization/fp8.py,
v0.5.9). The names that read a checkpoint: `ModelConfig._verify_quantization`
(compatible_quantization_methods, the methods' override_quantization_method; v0.5.9).
"""

from __future__ import annotations

from kvtier.engines import quantization
from kvtier.model.description import ModelSpec

NAMES = quantization.QuantizationNames(
    engine="SGLang",
    release="v0.5.9",
    # QUANTIZATION_CHOICES (srt/server_args.py, v0.5.9)
    methods=(
        "awq",
        "fp8",
        "mxfp8",
        "gptq",
        "marlin",
        "gptq_marlin",
        "awq_marlin",
        "bitsandbytes",
        "gguf",
        "modelopt",
        "modelopt_fp8",
        "modelopt_fp4",
        "petit_nvfp4",
        "w8a8_int8",
        "w8a8_fp8",
        "moe_wna16",
        "qoq",
        "w4afp8",
        "mxfp4",
        "auto-round",
        "compressed-tensors",
        "modelslim",
        "quark_int4fp8_moe",
    ),
    online_fp8=frozenset({"fp8"}),
    checkpoint={
        "fp8": frozenset({"fp8", "modelopt", "modelopt_fp8", "w8a8_fp8", "compressed-tensors"}),
        "nvfp4": frozenset({"modelopt", "modelopt_fp4", "petit_nvfp4", "compressed-tensors"}),
        "mxfp4": frozenset({"mxfp4"}),
        "awq": frozenset({"awq", "awq_marlin", "moe_wna16", "auto-round"}),
        "gptq": frozenset({"gptq", "gptq_marlin", "marlin", "moe_wna16", "auto-round"}),
    },
)


def loaded_model(model: ModelSpec, method: str | None) -> tuple[ModelSpec, str | None]:
    """The model as SGLang loads it under `--quantization method`, and what the flag did."""
    return quantization.loaded_model(model, method, NAMES)
