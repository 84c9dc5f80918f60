"""Run vLLM's own sizing of a hybrid linear-attention model's KV cache over configurations.

Executed like runner.py (torch and an unpacked vLLM wheel on the path, the `vllm` package
entered without its `__init__`). Per case, from stdin:

- the recurrent state: `MambaStateShapeCalculator.gated_delta_net_state_shape`,
  `.mamba2_state_shape` or `.short_conv_state_shape` and the matching
  `MambaStateDtypeCalculator` method (layers/mamba/mamba_utils.py), called with the arguments
  `Qwen3NextForCausalLM`, `GraniteMoeHybridForCausalLM` or `Lfm2ForCausalLM`
  `.get_mamba_state_*_from_config` pass;
- the attention block size and the padded state page: `Platform._align_hybrid_block_size`
  (platforms/interface.py), with FlashAttention's kernel block sizes;
- the groups, blocks, concurrency and logged token count: `kv_cache_utils.get_kv_cache_configs`
  over one `FullAttentionSpec` per attention layer and one `MambaSpec` per linear layer.

stdout: one JSON object per case: block size, state page, groups, num_blocks, concurrency and
tokens, or the error vLLM raised.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from runner import _config, _enter_vllm, _Lines

DTYPES = {"auto": None, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float32": torch.float32, "fp8": torch.float8_e4m3fn}  # fmt: skip


def _kv_cache_dtype(cache_dtype: Any, model_dtype: Any = None) -> torch.dtype:
    """utils/torch_utils.get_kv_cache_torch_dtype for the strings these cases use."""
    if isinstance(cache_dtype, torch.dtype):
        return cache_dtype
    if cache_dtype == "auto":
        return model_dtype if isinstance(model_dtype, torch.dtype) else DTYPES[model_dtype]
    return DTYPES[cache_dtype]


def _stub(name: str, **attrs: Any) -> None:
    module = sys.modules.get(name) or types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


class _MultipleOf:
    def __init__(self, base: int) -> None:
        self.base = base


def _enter(site: Path) -> None:
    _enter_vllm(site)
    # packages entered without their __init__ (which imports the engine), like `vllm` itself
    for package in ("model_executor", "model_executor/layers", "model_executor/layers/mamba",
                    "platforms"):  # fmt: skip
        module = types.ModuleType("vllm." + package.replace("/", "."))
        module.__path__ = [str(site / "vllm" / package)]
        sys.modules[module.__name__] = module
    platform = SimpleNamespace(register_custom_kv_cache_specs=lambda _config: None)
    sys.modules["vllm.platforms"].current_platform = platform  # type: ignore[attr-defined]
    # v0.24's spec registry imports the managers, which import the block pool (not used here)
    _stub("vllm.config", get_current_vllm_config_or_none=lambda: None)
    _stub("vllm.v1.core.block_pool", BlockPool=object)
    _stub("vllm.config.cache", MambaDType=str)
    _stub("vllm.config.model", ModelDType=str)
    _stub("vllm.config.vllm", set_current_vllm_config=lambda _c: contextlib.nullcontext())
    _stub("vllm.distributed", divide=lambda a, b: a // b if a % b == 0 else _indivisible(a, b))
    sys.modules["vllm.distributed"].__path__ = [str(site / "vllm" / "distributed")]
    _stub(
        "vllm.utils.torch_utils",
        get_kv_cache_torch_dtype=_kv_cache_dtype,
        STR_DTYPE_TO_TORCH_DTYPE={k: v for k, v in DTYPES.items() if v is not None},
    )
    _stub("vllm.v1.attention.backend", MultipleOf=_MultipleOf)
    _stub("vllm.v1.attention.backends.registry", AttentionBackendEnum=object)


def _indivisible(a: int, b: int) -> int:
    raise AssertionError(f"{a} is not divisible by {b}")


def _state_shape(mamba_utils: Any, case: dict[str, Any]) -> Any:
    """The shape each model's get_mamba_state_shape_from_config passes on: Qwen3Next (Gated
    DeltaNet), GraniteMoeHybrid (Mamba2: groups x d_state as keys, heads x head_dim as values),
    Lfm2 (short conv over conv_dim channels)."""
    calc = mamba_utils.MambaStateShapeCalculator
    tp, kind, kernel = case["tp"], case.get("kind", "gdn"), case["conv_kernel"]
    if kind == "mamba2":
        return calc.mamba2_state_shape(
            tp_world_size=tp, intermediate_size=case["value_heads"] * case["value_dim"],
            n_groups=case["key_heads"], num_heads=case["value_heads"],
            head_dim=case["value_dim"], state_size=case["key_dim"], conv_kernel=kernel,
        )  # fmt: skip
    if kind == "short_conv":
        return calc.short_conv_state_shape(tp, case["value_heads"], kernel)
    return calc.gated_delta_net_state_shape(
        tp, case["key_heads"], case["value_heads"], case["key_dim"], case["value_dim"], kernel, 0
    )


def _model_class(mamba_utils: Any, case: dict[str, Any]) -> type:
    class Hybrid:
        """The two classmethods the model class gives the block-size alignment."""

        @classmethod
        def get_mamba_state_shape_from_config(cls, config: Any) -> Any:
            return _state_shape(mamba_utils, case)

        @classmethod
        def get_mamba_state_dtype_from_config(cls, config: Any) -> Any:
            calc = mamba_utils.MambaStateDtypeCalculator
            model, conv = config.model_config.dtype, config.cache_config.mamba_cache_dtype
            if case.get("kind") == "short_conv":
                return calc.short_conv_state_dtype(model, conv)
            if case.get("kind") == "mamba2":
                return calc.mamba2_state_dtype(
                    model, conv, config.cache_config.mamba_ssm_cache_dtype
                )
            return calc.gated_delta_net_state_dtype(
                model, conv, config.cache_config.mamba_ssm_cache_dtype
            )

    return Hybrid


def run(case: dict[str, Any], modules: dict[str, Any], lines: _Lines) -> dict[str, Any]:
    utils, iface, mamba_utils, platform = (modules[k] for k in ("utils", "iface", "mamba", "pf"))
    model_dtype = DTYPES[case["model_dtype"]]
    mode = "align" if case["prefix_caching"] else "none"
    config = _config(case)
    config.model_config.__dict__.update(
        dtype=model_dtype, use_mla=False, architecture="Qwen3NextForCausalLM", is_hybrid=True,
        get_num_kv_heads=lambda _p: max(1, case["heads"] // case["tp"]),
        get_head_size=lambda: case["head_dim"],
    )  # fmt: skip
    config.cache_config.__dict__.update(
        cache_dtype=case["kv_cache_dtype"],
        block_size=case["block"],
        user_specified_block_size=False,
        mamba_cache_mode=mode,
        mamba_block_size=case["block"] if mode == "align" else case["max_model_len"],
        user_specified_mamba_block_size=False,
        mamba_page_size_padded=None,
        mamba_cache_dtype="auto",
        mamba_ssm_cache_dtype=case["ssm_cache_dtype"],
        kv_cache_dtype_skip_layers=None,
    )
    config.parallel_config.__dict__.update(tensor_parallel_size=case["tp"])
    config.speculative_config = None
    config.kv_transfer_config = None  # v0.24: no KV connector
    model_cls = _model_class(mamba_utils, case)
    registry = SimpleNamespace(resolve_model_cls=lambda *a, **k: (model_cls, "Hybrid"))
    _stub("vllm.model_executor.models", ModelRegistry=registry)
    backend = SimpleNamespace(get_supported_kernel_block_sizes=lambda: [_MultipleOf(16)])
    platform.Platform._align_hybrid_block_size(config, backend)
    block = config.cache_config.block_size
    if mode == "align":
        config.cache_config.mamba_block_size = block
    dtypes = model_cls.get_mamba_state_dtype_from_config(config)
    shapes = model_cls.get_mamba_state_shape_from_config(config)
    kv_dtype = _kv_cache_dtype(case["kv_cache_dtype"], model_dtype)
    specs: dict[str, Any] = {}
    for i, linear in enumerate(case["linear"]):
        if linear:
            specs[f"model.layers.{i}.linear_attn"] = iface.MambaSpec(
                shapes=shapes,
                dtypes=dtypes,
                block_size=config.cache_config.mamba_block_size,
                page_size_padded=config.cache_config.mamba_page_size_padded,
                mamba_cache_mode=mode,
            )
        else:
            specs[f"model.layers.{i}.self_attn.attn"] = iface.FullAttentionSpec(
                block_size=block,
                num_kv_heads=max(1, case["heads"] // case["tp"]),
                head_size=case["head_dim"],
                dtype=kv_dtype,
            )
    state = iface.MambaSpec(shapes=shapes, dtypes=dtypes, block_size=-1).page_size_bytes
    lines.lines.clear()
    sys.modules["vllm.logger"]._print_info_once.cache_clear()
    try:
        (kv,) = utils.get_kv_cache_configs(config, [specs], [case["available"]])
    except ValueError as exc:
        estimate = re.search(r"estimated maximum model length is (\d+)", str(exc))
        return {"error": str(exc), "estimated_max_len": int(estimate[1]) if estimate else None}
    size = next(x for x in lines.lines if x.startswith("GPU KV cache size"))
    return {
        "kind": case.get("kind", "gdn"),
        "block_size": block,
        "state_page": state,
        "groups": [
            [type(g.kv_cache_spec).__name__, len(g.layer_names)] for g in kv.kv_cache_groups
        ],
        "num_blocks": kv.num_blocks,
        "concurrency": utils.get_max_concurrency_for_kv_cache_config(config, kv),
        "tokens": int(re.search(r"([\d,]+) tokens", size)[1].replace(",", "")),
    }


def main() -> None:
    os.environ["VLLM_CONFIGURE_LOGGING"] = "0"  # no stdout handler: stdout carries the JSON
    _enter(Path(sys.argv[1]))
    modules = {
        "utils": importlib.import_module("vllm.v1.core.kv_cache_utils"),
        "iface": importlib.import_module("vllm.v1.kv_cache_interface"),
        "mamba": importlib.import_module("vllm.model_executor.layers.mamba.mamba_utils"),
        "pf": importlib.import_module("vllm.platforms.interface"),
    }
    lines = _Lines()
    logging.getLogger("vllm").addHandler(lines)
    logging.getLogger("vllm").setLevel(logging.INFO)
    cases = json.load(sys.stdin)["cases"]
    json.dump([run(c, modules, lines) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
