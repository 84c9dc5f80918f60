"""SGLang's launch flags that change the memory ledger or the simulated scheduler
(python/sglang/srt/server_args.py, `ServerArgs` fields and `add_cli_args`, v0.5.3 - v0.5.18;
arg_groups/fields/memory.py from v0.5.23; the printed name is the ServerArgs field)."""

from __future__ import annotations

from kvtier.engines.flags import FlagTable, as_upper, flag, one_of

# `choices=` of --hicache-write-policy and --hicache-storage-prefetch-policy
WRITE_POLICIES = ("write_back", "write_through", "write_through_selective")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
# the devices --device's help names (server_args.py v0.5.2 - v0.5.9; musa added by v0.5.23,
# arg_groups/fields/device.py); no argparse choices
DEVICES = ("cuda", "xpu", "hpu", "npu", "cpu", "musa")

FLAGS = FlagTable(
    (
        flag("model_path", str, "model", field="model"),
        flag("tp_size", int, "tp", "tensor-parallel-size", field="tp"),
        flag("pp_size", int, "pp", "pipeline-parallel-size", field="pp"),
        flag("dp_size", int, "dp", "data-parallel-size", field="dp"),
        flag("enable_dp_attention", None),
        flag("enable_dp_lm_head", None),
        flag("mem_fraction_static", float, field="mem_fraction"),
        flag("device", one_of(*DEVICES)),
        flag("kv_cache_dtype", str),
        flag("dtype", str),
        flag("quantization", str),
        flag("page_size", int),
        flag("context_length", int),
        flag("max_running_requests", int),
        flag("max_total_tokens", int),
        flag("chunked_prefill_size", int),
        flag("cuda_graph_max_bs", int),
        flag("speculative_algorithm", as_upper, "speculative-algo"),
        flag(
            "speculative_draft_model_path",
            str,
            "speculative-draft-model",
            "speculative-draft",
            field="draft_model",
        ),
        flag("speculative_num_steps", int),
        flag("speculative_eagle_topk", int),
        flag("speculative_num_draft_tokens", int),
        flag("enable_hierarchical_cache", None, field="hicache.enable"),
        flag("hicache_ratio", float, field="hicache.ratio"),
        flag("disable_radix_cache", None, field="hybrid.disable_radix_cache"),
        flag("mamba_full_memory_ratio", float, field="hybrid.mamba_full_memory_ratio"),
        flag("max_mamba_cache_size", int, field="hybrid.max_mamba_cache_size"),
        flag("mamba_ssm_dtype", str, field="hybrid.mamba_ssm_dtype"),
        flag("hicache_size", float, field="hicache.size_gb"),
        flag("hicache_write_policy", one_of(*WRITE_POLICIES), field="hicache.write_policy"),
        flag(
            "hicache_storage_prefetch_policy",
            one_of(*PREFETCH_POLICIES),
            field="hicache.storage_prefetch_policy",
        ),
    )
)
