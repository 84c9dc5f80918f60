"""`--quantization` as both engines apply it to the checkpoint they load.

- Online fp8 (the flag on a checkpoint without a quantization_config): the engine builds
  `Fp8Config()` without a serialized checkpoint, whose get_quant_method quantizes every
  `LinearBase` (attention projections, the MLA down-projections, dense MLPs, shared experts) and
  every `FusedMoE` (routed experts) to fp8 with one scale per tensor while loading; the embedding
  and lm_head (`VocabParallelEmbedding`), norms, the routers the models build with
  `quant_config=None` and the vision tower kvtier keeps in the model dtype.
- A quantized checkpoint: `ModelConfig._verify_quantization` accepts the flag only when it names
  the checkpoint's method or one that reads it (`gptq_marlin` for GPTQ, ...); otherwise it
  refuses. kvtier keeps the checkpoint's storage format, not its `quant_method` string, so a name
  of that format's family is accepted and the weights follow the checkpoint.

Each engine states its names in `engines/<engine>/quantization.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple

from kvtier.errors import KvtierError
from kvtier.model.description import ModelSpec, Quantization
from kvtier.model.params import LINEAR_GROUPS


class QuantizationNames(NamedTuple):
    """One engine's `--quantization` words, as a release spells them."""

    engine: str
    release: str  # the release the list was read in
    methods: tuple[str, ...]  # every accepted value
    online_fp8: frozenset[str]  # the values that quantize an unquantized checkpoint per tensor
    checkpoint: Mapping[str, frozenset[str]]  # kvtier's storage format -> the values that load it


def per_tensor_fp8(model: ModelSpec) -> ModelSpec:
    """`model` with its Linear and fused-MoE weights stored in fp8, one scale per tensor."""
    params = tuple(dataclasses.replace(g, quantized=g.name in LINEAR_GROUPS) for g in model.params)
    return dataclasses.replace(model, params=params, quantization=Quantization("fp8", 8))


def loaded_model(
    model: ModelSpec, method: str | None, names: QuantizationNames
) -> tuple[ModelSpec, str | None]:
    """The model as the engine loads it under `--quantization method`, and what the flag did."""
    if method is None:
        return model, None
    if method not in names.methods:
        raise KvtierError(
            f"--quantization {method!r} is not a {names.engine} quantization method "
            f"({names.release}: {', '.join(names.methods)})"
        )
    stored = model.quantization
    if stored is not None:
        accepted = names.checkpoint.get(stored.method, frozenset({"compressed-tensors"}))
        if method not in accepted:
            raise KvtierError(
                f"Quantization method specified in the model config ({stored.method}) does not "
                f"match the quantization method specified in the `quantization` argument "
                f"({method}). ({model.model_id}; kvtier accepts: {', '.join(sorted(accepted))})"
            )
        return model, f"--quantization {method}: the checkpoint's own {stored.method} weights"
    if method not in names.online_fp8:
        raise KvtierError(
            f"--quantization {method} on a checkpoint without a quantization_config is not "
            f"modelled ({model.model_id}); kvtier models online fp8: "
            + ", ".join(sorted(names.online_fp8))
        )
    return per_tensor_fp8(model), (
        f"--quantization {method}: Linear and fused-MoE weights quantized to fp8 per tensor at "
        "load; embedding, lm_head, norms, routers and vision tower kept in the model dtype"
    )
