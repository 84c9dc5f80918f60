"""SGLang's launch flags that change the memory ledger or the simulated scheduler
(python/sglang/srt/server_args.py, `ServerArgs` fields and `add_cli_args`, v0.5.3 - v0.5.18;
arg_groups/fields/memory.py from v0.5.23; the printed name is the ServerArgs field)."""

from __future__ import annotations

from kvtier.engines.flags import Flag, FlagTable, as_upper, one_of

# `choices=` of --hicache-write-policy and --hicache-storage-prefetch-policy
WRITE_POLICIES = ("write_back", "write_through", "write_through_selective")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")

FLAGS = FlagTable(
    (
        Flag("model", "model_path", str, ("model-path", "model")),
        Flag("tp", "tp_size", int, ("tp-size", "tp", "tensor-parallel-size")),
        Flag("pp", "pp_size", int, ("pp-size", "pp", "pipeline-parallel-size")),
        Flag("dp", "dp_size", int, ("dp-size", "dp", "data-parallel-size")),
        Flag("enable_dp_attention", "enable_dp_attention", None, ("enable-dp-attention",)),
        Flag("mem_fraction", "mem_fraction_static", float, ("mem-fraction-static",)),
        Flag("kv_cache_dtype", "kv_cache_dtype", str, ("kv-cache-dtype",)),
        Flag("dtype", "dtype", str, ("dtype",)),
        Flag("quantization", "quantization", str, ("quantization",)),
        Flag("page_size", "page_size", int, ("page-size",)),
        Flag("context_length", "context_length", int, ("context-length",)),
        Flag("max_running_requests", "max_running_requests", int, ("max-running-requests",)),
        Flag("max_total_tokens", "max_total_tokens", int, ("max-total-tokens",)),
        Flag("chunked_prefill_size", "chunked_prefill_size", int, ("chunked-prefill-size",)),
        Flag("cuda_graph_max_bs", "cuda_graph_max_bs", int, ("cuda-graph-max-bs",)),
        Flag(
            "speculative_algorithm",
            "speculative_algorithm",
            as_upper,
            ("speculative-algorithm", "speculative-algo"),
        ),
        Flag(
            "draft_model",
            "speculative_draft_model_path",
            str,
            ("speculative-draft-model-path", "speculative-draft-model", "speculative-draft"),
        ),
        Flag("speculative_num_steps", "speculative_num_steps", int, ("speculative-num-steps",)),
        Flag("speculative_eagle_topk", "speculative_eagle_topk", int, ("speculative-eagle-topk",)),
        Flag(
            "speculative_num_draft_tokens",
            "speculative_num_draft_tokens",
            int,
            ("speculative-num-draft-tokens",),
        ),
        Flag(
            "enable_hierarchical_cache",
            "enable_hierarchical_cache",
            None,
            ("enable-hierarchical-cache",),
        ),
        Flag("hicache_ratio", "hicache_ratio", float, ("hicache-ratio",)),
        Flag("disable_radix_cache", "disable_radix_cache", None, ("disable-radix-cache",)),
        Flag(
            "mamba_full_memory_ratio",
            "mamba_full_memory_ratio",
            float,
            ("mamba-full-memory-ratio",),
        ),
        Flag("max_mamba_cache_size", "max_mamba_cache_size", int, ("max-mamba-cache-size",)),
        Flag("mamba_ssm_dtype", "mamba_ssm_dtype", str, ("mamba-ssm-dtype",)),
        Flag("hicache_size_gb", "hicache_size", float, ("hicache-size",)),
        Flag(
            "hicache_write_policy",
            "hicache_write_policy",
            one_of(*WRITE_POLICIES),
            ("hicache-write-policy",),
        ),
        Flag(
            "hicache_storage_prefetch_policy",
            "hicache_storage_prefetch_policy",
            one_of(*PREFETCH_POLICIES),
            ("hicache-storage-prefetch-policy",),
        ),
    )
)
