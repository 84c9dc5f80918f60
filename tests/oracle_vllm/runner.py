"""Run vLLM's own KV-cache grouping and report over configurations read from stdin (JSON).

Executed by a Python that has torch and an unpacked vLLM wheel on its path (no other vLLM
dependency): the `vllm` package is entered without its `__init__` (which imports the whole
engine), and the few modules kv_cache_utils imports for hashing, requests and configuration,
which none of the functions called here use, are stubbed.

stdin:  {"cases": [{"kinds": "FSSSSS...", "window": 1024, "chunk": null, "block": 16,
                    "heads": 8, "head_dim": 128, "available": 123, "max_model_len": 8192,
                    "batched": 8192, "disable_hybrid": false}, ...]}
stdout: one JSON object per case, in order: groups, num_blocks, concurrency, the two lines
        `_report_kv_cache_config` logs, or the error vLLM raised.
"""

from __future__ import annotations

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


class _Members(type):
    def __getattr__(cls, name: str) -> str:
        return name


class _AnyMember(metaclass=_Members):
    """Stands for an enum only named in field defaults of specs not built here."""


def _enter_vllm(site: Path) -> None:
    package = types.ModuleType("vllm")
    package.__path__ = [str(site / "vllm")]
    sys.modules["vllm"] = package
    stubs: dict[str, dict[str, Any]] = {
        "vllm.config": {"VllmConfig": object},
        "vllm.v1.request": {"Request": object},
        # the logger's `info_once` asks whether this process is the node's first rank: one process
        "vllm.distributed.parallel_state": {
            "is_global_first_rank": lambda: True,
            "is_local_first_rank": lambda: True,
        },
        "vllm.v1.utils": {"tensor_data": None},
        "vllm.utils.hashing": {"sha256_cbor": None, "xxhash_cbor": None},
        "vllm.utils.mem_utils": {"format_gib": lambda b: round(b / (1 << 30), 2)},
        "vllm.utils.torch_utils": {
            "get_dtype_size": lambda dtype: torch.tensor([], dtype=dtype).element_size(),
            "nvfp4_kv_cache_full_dim": None,
        },
        "vllm.v1.attention.backends.registry": {"MambaAttentionBackendEnum": _AnyMember},
    }
    for name, attrs in stubs.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _config(case: dict[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(
        model_config=SimpleNamespace(
            max_model_len=case["max_model_len"], original_max_model_len=case["max_model_len"]
        ),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=case["batched"],
            disable_hybrid_kv_cache_manager=case["disable_hybrid"],
        ),
        parallel_config=SimpleNamespace(
            decode_context_parallel_size=1, prefill_context_parallel_size=1
        ),
        cache_config=SimpleNamespace(num_gpu_blocks_override=None),
    )


def _specs(iface: Any, case: dict[str, Any]) -> dict[str, Any]:
    common = {
        "block_size": case["block"],
        "num_kv_heads": case["heads"],
        "head_size": case["head_dim"],
        "dtype": getattr(torch, case["dtype"]),
    }
    specs: dict[str, Any] = {}
    for i, kind in enumerate(case["kinds"]):
        if kind == "F":
            spec = iface.FullAttentionSpec(**common)
        elif kind == "S":
            spec = iface.SlidingWindowSpec(**common, sliding_window=case["window"])
        else:
            spec = iface.ChunkedLocalAttentionSpec(**common, attention_chunk_size=case["chunk"])
        specs[f"model.layers.{i}.self_attn.attn"] = spec
    return specs


def run(case: dict[str, Any], utils: Any, iface: Any, lines: _Lines) -> dict[str, Any]:
    config = _config(case)
    lines.lines.clear()
    sys.modules["vllm.logger"]._print_info_once.cache_clear()
    try:
        (kv,) = utils.get_kv_cache_configs(config, [_specs(iface, case)], [case["available"]])
    except ValueError as exc:
        estimate = re.search(r"estimated maximum model length is (\d+)", str(exc))
        return {"error": str(exc), "estimated_max_len": int(estimate[1]) if estimate else None}
    size = next(x for x in lines.lines if x.startswith("GPU KV cache size"))
    conc = next(x for x in lines.lines if x.startswith("Maximum concurrency"))
    return {
        "groups": [
            [type(g.kv_cache_spec).__name__, len(g.layer_names)] for g in kv.kv_cache_groups
        ],
        "num_blocks": kv.num_blocks,
        "concurrency": utils.get_max_concurrency_for_kv_cache_config(config, kv),
        "tokens": int(re.search(r"([\d,]+) tokens", size)[1].replace(",", "")),
        "lines": [size, conc],
    }


def main() -> None:
    os.environ["VLLM_CONFIGURE_LOGGING"] = "0"  # no stdout handler: stdout carries the JSON
    _enter_vllm(Path(sys.argv[1]))
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    iface = importlib.import_module("vllm.v1.kv_cache_interface")
    lines = _Lines()
    logging.getLogger("vllm").addHandler(lines)
    logging.getLogger("vllm").setLevel(logging.INFO)
    cases = json.load(sys.stdin)["cases"]
    json.dump([run(c, utils, iface, lines) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
