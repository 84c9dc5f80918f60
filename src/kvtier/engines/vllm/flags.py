"""vLLM's launch flags that change the memory ledger (vllm/engine/arg_utils.py `EngineArgs`;
the printed name is the EngineArgs field, as `non-default args: {...}` shows it).
`--speculative-config` is JSON and read by the launch parser itself."""

from __future__ import annotations

import json

from kvtier.engines.flags import BadChoice, FlagTable, flag, one_of


def json_object(raw: str) -> str:
    """A JSON object's text, as given (`--kv-transfer-config`)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadChoice("a JSON object; this is not JSON") from None
    if not isinstance(value, dict):
        raise BadChoice("a JSON object")
    return raw


FLAGS = FlagTable(
    (
        flag("model", str),
        flag("tensor_parallel_size", int, "tp", field="tp"),
        flag("pipeline_parallel_size", int, "pp", field="pp"),
        flag("data_parallel_size", int, "dp", field="dp"),
        flag("gpu_memory_utilization", float, field="mem_fraction"),
        flag("kv_cache_dtype", str),
        flag("dtype", str),
        flag("quantization", str, "q"),
        flag("enable_chunked_prefill", None),
        flag("block_size", int, field="page_size"),
        flag("max_model_len", int, field="context_length"),
        flag("max_num_seqs", int, field="max_running_requests"),
        flag("max_num_batched_tokens", int, field="chunked_prefill_size"),
        flag("kv_cache_memory_bytes", int),
        flag("kv_offloading_size", float, field="kv_offloading_size_gib"),
        flag("enable_prefix_caching", None, field="hybrid.enable_prefix_caching"),
        flag("kv_offloading_backend", one_of("native", "lmcache")),
        flag("kv_transfer_config", json_object),
        flag("long_prefill_token_threshold", int),
        flag("scheduling_policy", one_of("fcfs", "priority")),
        flag("mamba_ssm_cache_dtype", str, field="hybrid.mamba_ssm_dtype"),
        flag("async_scheduling", None),
        flag("disable_hybrid_kv_cache_manager", None),
        flag("kv_events_config", json_object),
        flag("enable_sleep_mode", None),
        flag("enable_cumem_allocator", None),
    )
)
