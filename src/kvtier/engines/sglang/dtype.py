"""The dtype SGLang runs a model in under `--dtype auto`, and its KV dtype under
`--kv-cache-dtype auto`.

  run dtype  configs/model_config.py `_get_and_verify_dtype`, the same in v0.5.3 - v0.5.23: the
             config's `dtype` / `torch_dtype` (an unstated one read as float32) is kept, except
             that a float32 config runs in float16, or in bfloat16 when the text config's
             model_type starts with `gemma`.
  KV dtype   ModelRunner.configure_kv_cache_dtype (v0.5.3 - v0.5.22; v0.5.23
             mem_cache/kv_cache_dtype.py): fp8_e4m3 when the checkpoint's quantization config
             states kv_cache_quant_algo FP8 (ModelOpt), else the run dtype; v0.5.2 and earlier
             always the run dtype. A DSA model's `auto` is resolved earlier, by server_args.
"""

from __future__ import annotations

from typing import NamedTuple

from kvtier.engines.sglang.versions import V0_5_3
from kvtier.engines.version import Version
from kvtier.model.description import ModelSpec

RULE = "configs/model_config.py _get_and_verify_dtype, SGLang v0.5.3 - v0.5.23"


class RunDtype(NamedTuple):
    name: str
    rule: str  # why, with the upstream function


def run_dtype(model: ModelSpec) -> RunDtype:
    """The dtype `--dtype auto` runs `model` in, and the rule that chose it."""
    if model.config_dtype != "float32":
        return RunDtype(model.dtype, f"the config's {model.dtype}")
    # Gemma's text configs are model_type gemma, gemma2, gemma3_text, ...: so are their classes
    if model.architecture.lower().startswith("gemma"):
        return RunDtype("bfloat16", f"a float32 config runs in bfloat16 for Gemma ({RULE})")
    return RunDtype("float16", f"a float32 config runs in float16 ({RULE})")


def checkpoint_kv_dtype(version: Version, model: ModelSpec) -> RunDtype | None:
    """fp8_e4m3 and why, when `--kv-cache-dtype auto` takes the checkpoint's ModelOpt FP8 KV
    format; None when `auto` is the run dtype."""
    if model.kv_cache_quant_algo != "fp8" or version < V0_5_3:
        return None
    return RunDtype(
        "fp8_e4m3",
        "auto -> fp8_e4m3: the checkpoint's kv_cache_quant_algo fp8 "
        "(ModelRunner.configure_kv_cache_dtype, SGLang v0.5.3+)",
    )
