"""vLLM's launch flags that change the memory ledger (vllm/engine/arg_utils.py `EngineArgs`;
the printed name is the EngineArgs field, as `non-default args: {...}` shows it).
`--speculative-config` is JSON and read by the launch parser itself."""

from __future__ import annotations

import json

from kvtier.engines.flags import BadChoice, Flag, FlagTable, one_of


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
        Flag("model", "model", str, ("model",)),
        Flag("tp", "tensor_parallel_size", int, ("tensor-parallel-size", "tp")),
        Flag("pp", "pipeline_parallel_size", int, ("pipeline-parallel-size", "pp")),
        Flag("dp", "data_parallel_size", int, ("data-parallel-size", "dp")),
        Flag("mem_fraction", "gpu_memory_utilization", float, ("gpu-memory-utilization",)),
        Flag("kv_cache_dtype", "kv_cache_dtype", str, ("kv-cache-dtype",)),
        Flag("dtype", "dtype", str, ("dtype",)),
        Flag("quantization", "quantization", str, ("quantization", "q")),
        Flag("enable_chunked_prefill", "enable_chunked_prefill", None, ("enable-chunked-prefill",)),
        Flag("page_size", "block_size", int, ("block-size",)),
        Flag("context_length", "max_model_len", int, ("max-model-len",)),
        Flag("max_running_requests", "max_num_seqs", int, ("max-num-seqs",)),
        Flag("chunked_prefill_size", "max_num_batched_tokens", int, ("max-num-batched-tokens",)),
        Flag("kv_cache_memory_bytes", "kv_cache_memory_bytes", int, ("kv-cache-memory-bytes",)),
        Flag("kv_offloading_size_gib", "kv_offloading_size", float, ("kv-offloading-size",)),
        Flag("enable_prefix_caching", "enable_prefix_caching", None, ("enable-prefix-caching",)),
        Flag(
            "kv_offloading_backend",
            "kv_offloading_backend",
            one_of("native", "lmcache"),
            ("kv-offloading-backend",),
        ),
        Flag("kv_transfer_config", "kv_transfer_config", json_object, ("kv-transfer-config",)),
        Flag(
            "long_prefill_token_threshold",
            "long_prefill_token_threshold",
            int,
            ("long-prefill-token-threshold",),
        ),
        Flag(
            "scheduling_policy",
            "scheduling_policy",
            one_of("fcfs", "priority"),
            ("scheduling-policy",),
        ),
        Flag("mamba_ssm_dtype", "mamba_ssm_cache_dtype", str, ("mamba-ssm-cache-dtype",)),
    )
)
