"""KV-cache element types each engine accepts for `--kv-cache-dtype`, and their byte widths.

`auto` stores the model dtype, whose width comes from the one dtype table (`kvtier.model.dtypes`).
"""

from __future__ import annotations

from typing import NamedTuple

from kvtier.engines.deployment import Engine
from kvtier.errors import KvtierError
from kvtier.model.dtypes import DTYPE_BYTES, dtype_bytes

# SGLang server_args `--kv-cache-dtype` choices (v0.5.x). FP8 pools store uint8: 1 byte, per-tensor
# scales only, so no per-token overhead (memory_pool.py, MHATokenToKVPool).
_SGLANG = {
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp4_e2m1": 1,  # packed two per byte; the cell formula halves it and adds block scales
}

# vLLM CacheConfig cache_dtype choices (vllm/config/cache.py).
_VLLM = {
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_ds_mla": 1,  # DeepSeek sparse-MLA layout: 656 bytes per token per layer, see vllm.py
}


class KVDtype(NamedTuple):
    name: str  # as the engine was asked for it, after resolving "auto"
    element_bytes: int

    @property
    def is_fp4(self) -> bool:
        return self.name == "fp4_e2m1"


def resolve_kv_dtype(engine: Engine, kv_cache_dtype: str, model_dtype: str) -> KVDtype:
    """The KV element type an engine uses; "auto" means the model dtype (both engines)."""
    choices = _SGLANG if engine is Engine.SGLANG else _VLLM
    if kv_cache_dtype == "auto":
        if model_dtype.strip().lower().removeprefix("torch.") not in DTYPE_BYTES:
            raise KvtierError(f"model dtype {model_dtype!r} is not known; pass --kv-cache-dtype")
        return KVDtype(model_dtype, dtype_bytes(model_dtype))
    if kv_cache_dtype not in choices:
        known = ", ".join(["auto", *choices])
        raise KvtierError(
            f"--kv-cache-dtype {kv_cache_dtype!r} is not a {engine} KV dtype (known: {known})"
        )
    return KVDtype(kv_cache_dtype, choices[kv_cache_dtype])
