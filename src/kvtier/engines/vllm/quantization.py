"""vLLM's `--quantization`: the weights the engine loads for it.

- Online fp8 (`fp8` on a checkpoint without a quantization_config; `fp8_per_tensor` from
  v0.20): `Fp8Config(is_checkpoint_fp8_serialized=False)`.get_quant_method quantizes every
  `LinearBase` (attention projections, the MLA down-projections, dense MLPs, shared experts)
  and every `FusedMoE` (routed experts) to fp8 with one scale per tensor while loading
  (`Fp8OnlineLinearMethod`, `Fp8OnlineMoEMethod`); the embedding and lm_head
  (`VocabParallelEmbedding`), norms, the routers the models build with `quant_config=None` and
  the vision tower kvtier keeps in the model dtype (model_executor/layers/quantization/fp8.py,
  v0.6.4 - v0.21.0).
- A quantized checkpoint: `ModelConfig._verify_quantization` accepts the flag only when it names
  the checkpoint's method or one of the overrides that read it (`gptq_marlin` for GPTQ,
  `awq_marlin` for AWQ, ...); otherwise it refuses. kvtier keeps the checkpoint's storage format,
  not its `quant_method` string, so a name of the format's family is accepted and the weights
  follow the checkpoint.
"""

from __future__ import annotations

import dataclasses

from kvtier.errors import KvtierError
from kvtier.spec.model import ModelSpec, Quantization
from kvtier.spec.params import (
    ATTENTION,
    ATTENTION_KV,
    ATTENTION_LATENT,
    DENSE_MLP,
    ROUTED_EXPERTS,
    SHARED_EXPERTS,
)

# QuantizationMethods (model_executor/layers/quantization/__init__.py, v0.21.0)
METHODS = (
    "awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
    "modelopt_mixed", "gguf", "gptq_marlin", "awq_marlin", "gptq", "humming",
    "compressed-tensors", "bitsandbytes", "experts_int8", "quark", "moe_wna16", "torchao", "inc",
    "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "cpu_awq", "online", "fp8_per_tensor",
    "fp8_per_block", "int8_per_channel_weight_only", "mxfp8",
)  # fmt: skip
ONLINE_FP8 = frozenset({"fp8", "fp8_per_tensor"})
# parameter groups built from LinearBase or FusedMoE layers (spec/params.py)
LINEAR_GROUPS = frozenset(
    {ATTENTION, ATTENTION_KV, ATTENTION_LATENT, DENSE_MLP, ROUTED_EXPERTS, SHARED_EXPERTS}
)
# kvtier's storage format of a quantized checkpoint -> the --quantization names that load it
_CHECKPOINT_NAMES = {
    "fp8": frozenset(
        {"fp8", "fbgemm_fp8", "compressed-tensors", "modelopt", "modelopt_mixed", "deepseek_v4_fp8"}
    ),
    "nvfp4": frozenset({"modelopt_fp4", "modelopt_mixed", "compressed-tensors"}),
    "mxfp4": frozenset({"mxfp4", "gpt_oss_mxfp4", "quark"}),
    "awq": frozenset({"awq", "awq_marlin", "moe_wna16", "cpu_awq", "inc"}),
    "gptq": frozenset({"gptq", "gptq_marlin", "moe_wna16", "inc"}),
}


def check_method(method: str) -> str:
    """`method` as vLLM spells it, or the refusal naming the accepted names."""
    if method not in METHODS:
        raise KvtierError(
            f"--quantization {method!r} is not a vLLM quantization method "
            f"(v0.21: {', '.join(METHODS)})"
        )
    return method


def loaded_model(model: ModelSpec, method: str | None) -> tuple[ModelSpec, str | None]:
    """The model as vLLM loads it under `--quantization method`, and what the flag did."""
    if method is None:
        return model, None
    check_method(method)
    stored = model.quantization
    if stored is not None:
        names = _CHECKPOINT_NAMES.get(stored.method, frozenset({"compressed-tensors"}))
        if method not in names:
            raise KvtierError(
                f"Quantization method specified in the model config ({stored.method}) does not "
                f"match the quantization method specified in the `quantization` argument "
                f"({method}). ({model.model_id}; kvtier accepts: {', '.join(sorted(names))})"
            )
        return model, f"--quantization {method}: the checkpoint's own {stored.method} weights"
    if method not in ONLINE_FP8:
        raise KvtierError(
            f"--quantization {method} on a checkpoint without a quantization_config is not "
            f"modelled ({model.model_id}); kvtier models online fp8: "
            + ", ".join(sorted(ONLINE_FP8))
        )
    params = tuple(dataclasses.replace(g, quantized=g.name in LINEAR_GROUPS) for g in model.params)
    online = dataclasses.replace(model, params=params, quantization=Quantization("fp8", 8))
    return online, (
        f"--quantization {method}: Linear and fused-MoE weights quantized to fp8 per tensor at "
        "load; embedding, lm_head, norms, routers and vision tower kept in the model dtype"
    )
