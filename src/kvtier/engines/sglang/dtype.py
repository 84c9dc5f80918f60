"""The dtype SGLang runs a model in under `--dtype auto`: also its KV dtype under
`--kv-cache-dtype auto` (ModelRunner.configure_kv_cache_dtype: kv_cache_dtype = self.dtype).

configs/model_config.py `_get_and_verify_dtype`, the same in v0.5.3 - v0.5.23: the config's
`dtype` / `torch_dtype` (an unstated one read as float32) is kept, except that a float32 config
runs in float16, or in bfloat16 when the text config's model_type starts with `gemma`.
"""

from __future__ import annotations

from typing import NamedTuple

from kvtier.spec.model import ModelSpec

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
