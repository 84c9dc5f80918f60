"""Run SGLang's own hybrid linear-attention state sizing over configurations; print it as JSON.

Executed by a bare interpreter (`python3 -I -S`), never imported by kvtier:

    python3 -I -S sglang_mamba.py <mamba_utils.py> <handler file> [allocation_sizing.py] < cases

The wheel's configs/mamba_utils.py (Mamba2StateShape.create, mamba_cache_per_req) and the file
holding the slot rule (model_runner.py / model_runner_kv_cache_mixin.py `handle_max_mamba_cache`,
mem_cache/kv_cache_configurator.py `_handle_max_mamba_cache`) run as released; every other
import is an empty stub, and numpy and the torch dtypes are the few pieces they use. Each case
prints the state bytes per slot, the slots and the budget left for KV.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # a bare interpreter leaves the script's folder out
from oracle_stubs import StubFinder


class _Dtype:
    def __init__(self, name: str, itemsize: int) -> None:
        self.name, self.itemsize = name, itemsize


DTYPES = {"float32": _Dtype("float32", 4), "bfloat16": _Dtype("bfloat16", 2),
          "float16": _Dtype("float16", 2)}  # fmt: skip


class _Args(types.SimpleNamespace):
    """server_args, and the runtime context's schedule / memory / exec / spec views."""

    def override(self, _name: str, **values: Any) -> None:
        for key, value in values.items():
            setattr(self, key, value)

    def enable_mamba_extra_buffer(self) -> bool:  # v0.5.16 asks server_args
        return bool(self.mamba.enable_mamba_extra_buffer)

    def enable_mamba_extra_buffer_lazy(self) -> bool:
        return False


SSM_FLAG: list[str | None] = [None]  # --mamba-ssm-dtype, as server_args hands it to the env


def _state_dtype(utils: Any, c: dict[str, Any]) -> Any:
    """mamba2_state_dtype as the server runs it: from v0.5.9 over the model's config (the flag
    through envs, None when not given); before, from the env var server_args always sets
    (its default float32)."""
    SSM_FLAG[0] = c["ssm_flag"]
    if inspect.signature(utils.mamba2_state_dtype).parameters:
        stated = {} if c["config_ssm"] is None else {"mamba_ssm_dtype": c["config_ssm"]}
        return utils.mamba2_state_dtype(types.SimpleNamespace(**stated))
    os.environ["SGLANG_MAMBA_SSM_DTYPE"] = c["ssm_flag"] or "float32"
    return utils.mamba2_state_dtype()


def _divide(a: int, b: int) -> int:
    assert a % b == 0, f"{a} is not divisible by {b}"
    return a // b


def _install() -> None:
    sys.meta_path.insert(0, StubFinder())
    numpy = types.ModuleType("numpy")
    numpy.prod = lambda xs: math.prod(xs)  # type: ignore[attr-defined]
    numpy.sum = lambda xs: sum(xs)  # type: ignore[attr-defined]
    sys.modules["numpy"] = numpy
    import torch  # the stub

    for name, dtype in DTYPES.items():
        setattr(torch, name, dtype)
    import sglang.srt.distributed.utils as dist_utils  # the stub
    import sglang.srt.environ as environ  # the stub

    dist_utils.divide = _divide  # type: ignore[attr-defined]
    environ.envs = types.SimpleNamespace(  # type: ignore[attr-defined]
        SGLANG_MAMBA_CONV_DTYPE=types.SimpleNamespace(get=lambda: None),
        SGLANG_MAMBA_SSM_DTYPE=types.SimpleNamespace(get=lambda: SSM_FLAG[0]),
        SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=types.SimpleNamespace(get=lambda: False),
    )


def _load(name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _handler(module: Any) -> Any:
    for owner in ("KVCacheConfigurator", "ModelRunnerKVCacheMixin", "ModelRunner"):
        cls = getattr(module, owner, None)
        if cls is None or not isinstance(cls, type):
            continue
        for name in ("_handle_max_mamba_cache", "handle_max_mamba_cache"):
            if name in vars(cls):
                return vars(cls)[name]
    raise SystemExit("no handle_max_mamba_cache in the handler file")


def _shape_arguments(c: dict[str, Any]) -> dict[str, int]:
    """Mamba2StateShape.create's arguments as the model's config passes them: Qwen3-Next /
    Qwen3.5 and GraniteMoeHybrid (Mamba2) alike; Lfm2Config.mamba2_cache_params for a short-conv
    case (hidden_size channels, one group, num_heads = tp, state_size 0)."""
    if c.get("kind") == "short_conv":
        channels = c["value_heads"]
        return {"tp_world_size": c["tp"], "intermediate_size": channels, "n_groups": 1,
                "num_heads": c["tp"], "head_dim": channels, "state_size": 0,
                "conv_kernel": c["conv_kernel"]}  # fmt: skip
    return {
        "tp_world_size": c["tp"],
        "intermediate_size": c["value_heads"] * c["value_dim"],
        "n_groups": c["key_heads"],
        "num_heads": c["value_heads"],
        "head_dim": c["value_dim"],
        "state_size": c["key_dim"],
        "conv_kernel": c["conv_kernel"],
    }


def run(utils: Any, handler_module: Any, handle: Any, c: dict[str, Any]) -> dict[str, Any]:
    kwargs = _shape_arguments(c)
    shape = utils.Mamba2StateShape.create(**kwargs)
    dtype = _state_dtype(utils, c)
    params = utils.Mamba2CacheParams(shape=shape, layers=c["layers"], dtype=dtype)
    dp = c["dp"]
    args = _Args(
        max_mamba_cache_size=c["max_mamba_cache_size"],
        max_running_requests=c["max_running_requests"],
        mamba_full_memory_ratio=c["ratio"],
        disable_radix_cache=c["disable_radix_cache"],
        enable_dp_attention=dp > 1,
        dp_size=dp,
        speculative_num_draft_tokens=None,
        disable_overlap_schedule=False,
        mamba=types.SimpleNamespace(
            enable_linear_replayssm_spec=False,
            enable_mamba_extra_buffer=c["extra_buffer"],
            enable_mamba_extra_buffer_lazy=False,
        ),
    )
    for getter in ("get_schedule", "get_memory", "get_exec", "get_spec", "get_context"):
        if hasattr(handler_module, getter):
            setattr(handler_module, getter, lambda args=args: args)
    if hasattr(handler_module, "_pd_prefill_skips_mamba_spec_state"):
        handler_module._pd_prefill_skips_mamba_spec_state = lambda: False
    runner = types.SimpleNamespace(
        mambaish_config=types.SimpleNamespace(mamba2_cache_params=params),
        server_args=args,
        spec_algorithm=types.SimpleNamespace(is_none=lambda: True),
        dp_size=dp,
        attn_dp_size=dp,
        pp_size=1,
        ps=types.SimpleNamespace(attn_dp_size=dp, pp_size=1),
        hybrid_gdn_config=object(),
        hybrid_kda_config=None,
        extra_mamba_cache_bytes_per_req=0,
        fused_entry_bytes=lambda _name: None,
    )
    try:
        rest = handle(runner, c["rest_gib"])
    except RuntimeError as exc:
        return {"error": str(exc).split(".")[0]}
    out = {"state_bytes": params.mamba_cache_per_req, "slots": args.max_mamba_cache_size,
           "rest_gib": rest}  # fmt: skip
    configurator = getattr(handler_module, "KVCacheConfigurator", None)
    tokens = int(rest * (1 << 30)) // c["cell"]
    if tokens > 0 and hasattr(configurator, "resolve_max_num_reqs"):
        # v0.5.16+: the running-request limit from the pool's tokens and the state slots (a
        # pool of no tokens is refused before it)
        runner.model_config = types.SimpleNamespace(context_len=c["context_len"])
        runner._calculate_mamba_ratio = lambda: configurator._calculate_mamba_ratio(runner)
        try:
            out["max_running"] = configurator.resolve_max_num_reqs(runner, tokens)
        except RuntimeError as exc:  # no request fits the slots
            out["max_running"] = str(exc).split(".")[0]
    return out


def main() -> None:
    _install()
    utils = _load("sglang.srt.configs.mamba_utils", sys.argv[1])
    handler_module = _load("sglang_oracle_handler", sys.argv[2])
    if len(sys.argv) > 3:  # later releases take the extra_buffer slot count from this file
        sizing = _load("sglang.srt.mem_cache.allocation_sizing", sys.argv[3])
        if hasattr(sizing, "get_mamba_tracking_slots"):
            handler_module.get_mamba_tracking_slots = sizing.get_mamba_tracking_slots
    handle = _handler(handler_module)
    cases = json.load(sys.stdin)
    json.dump([run(utils, handler_module, handle, c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
