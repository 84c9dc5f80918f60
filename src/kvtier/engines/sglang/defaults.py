"""SGLang's default `--mem-fraction-static` when the flag is not given, rule by rule.

`gpu_mem_mib` is what server_args reads: get_nvgpu_memory_capacity(), the minimum over visible GPUs
of `nvidia-smi --query-gpu=memory.total` in MiB (not the free memory, not GiB).

Rules (`pool.FractionRule`; python/sglang/srt/server_args.py unless noted):
  TP_TABLE       v0.3 - v0.4.8    ServerArgs.__post_init__: a table by TP size
  RESERVE_TABLE  v0.4.9 - v0.5.3  ServerArgs.__post_init__: reserved MiB by GPU memory class
  HEURISTICS     v0.5.4 - v0.5.10 ServerArgs._handle_gpu_memory_settings ("General heuristics
                                  for --mem-fraction-static"): reserved MiB from
                                  chunked_prefill_size, cuda_graph_max_bs and TP x PP, floor
                                  10 GiB on big GPUs
  MEMORY_HOOK    main 2026        arg_groups/memory_hook.py handle_gpu_memory_settings +
                                  reserve_for_graph_mb
"""

from __future__ import annotations

from typing import NamedTuple

from kvtier.engines.deployment import Deployment
from kvtier.engines.sglang.pool import FractionRule

# Speculative algorithms that draft with a separate model or head.
STANDALONE = "STANDALONE"
NGRAM = "NGRAM"


class FractionDefault(NamedTuple):
    value: float
    rule: str  # the rule and its arithmetic, for the ledger's inputs
    chunked_prefill_size: int | None  # the tier's default, when the rule sets one
    cuda_graph_max_bs: int | None


def _rule_i(tp: int) -> FractionDefault:
    for min_tp, value in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if tp >= min_tp:
            return FractionDefault(
                value, f"v0.3-v0.4.8 TP table: tp>={min_tp} -> {value}", None, None
            )
    return FractionDefault(0.88, "v0.3-v0.4.8 TP table: tp=1 -> 0.88", None, None)


def _spec_reserve_mib(speculative: str | None) -> float:
    if speculative is None or speculative.upper() == NGRAM:
        return 0.0
    return 6 * 1024 if speculative.upper() == STANDALONE else 2 * 1024


def _rule_ii(gpu_mem: int, parallel: int, speculative: str | None, dp_attention: bool) -> float:
    if gpu_mem < 35 * 1024:  # T4, 4080 (< 20 GiB) and A10, L40, 4090, 5090 share the formula
        reserved = (2.8 + parallel / 10) * 1024
    elif gpu_mem < 90 * 1024:  # H100, A100
        reserved = (9.5 + parallel / 2) * 1024
    elif gpu_mem < 160 * 1024:  # H20, H200
        reserved = (12 + parallel / 2) * 1024
    else:  # B200, MI300
        reserved = 32 * 1024
    reserved += _spec_reserve_mib(speculative)
    if dp_attention:
        reserved += 4 * 1024
    return reserved


def _tier(gpu_mem: int, tp: int, rule: FractionRule) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) the heuristics pick by GPU memory and TP."""
    big_tp = tp >= 4
    if gpu_mem < 20 * 1024:
        return 2048, 8
    if gpu_mem < 35 * 1024:
        return (
            (2048, 80 if big_tp else 24)
            if rule is FractionRule.HEURISTICS
            else (4096, 160 if big_tp else 48)
        )
    if gpu_mem < 60 * 1024:
        return 4096, 160 if big_tp else 32
    if gpu_mem < 160 * 1024:
        return 8192, 512 if big_tp else 256
    return 16384, 512


def default_mem_fraction(
    rule: FractionRule, gpu_mem_mib: int | None, d: Deployment, is_mla: bool = False
) -> FractionDefault:
    """The fraction SGLang picks when `--mem-fraction-static` is unset, with its arithmetic."""
    tp, pp, dp, dp_attention = d.tp, d.pp, d.dp, d.enable_dp_attention
    speculative = d.speculative_algorithm
    chunked_prefill_size, cuda_graph_max_bs = d.chunked_prefill_size, d.cuda_graph_max_bs
    given = (chunked_prefill_size, cuda_graph_max_bs)
    if rule is FractionRule.TP_TABLE:
        return _rule_i(tp * (dp if dp_attention else 1))._replace(
            chunked_prefill_size=given[0], cuda_graph_max_bs=given[1]
        )
    parallel = tp * pp
    if gpu_mem_mib is None:
        value = 0.95 if rule is FractionRule.MEMORY_HOOK else 0.88
        text = f"{rule.name.lower()} rule: GPU memory unknown -> {value}"
        return FractionDefault(value, text, *given)
    if rule is FractionRule.RESERVE_TABLE:
        reserved = _rule_ii(gpu_mem_mib, parallel, speculative, dp_attention)
        value = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
        arithmetic = f"round(({gpu_mem_mib} - {reserved:.0f}) / {gpu_mem_mib}, 3)"
        text = f"v0.4.9-v0.5.3 reserve table: {arithmetic}"
        return FractionDefault(value, text, *given)
    tier_chunk, tier_bs = _tier(gpu_mem_mib, tp, rule)
    chunk = chunked_prefill_size or tier_chunk
    max_bs = cuda_graph_max_bs or tier_bs
    reserved = 512 + max(chunk, 2048) * 1.5 + parallel / 8 * 1024
    graphs = max_bs * 2.0
    if dp_attention:
        graphs += max_bs * dp * 3 + (max_bs * dp * 1.5 if max_bs > 300 else 0)
    if rule is FractionRule.MEMORY_HOOK and is_mla:
        graphs += 1.5 * 1024  # prefill CUDA graph reserve for MLA (reserve_for_graph_mb)
    reserved += graphs
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if rule is FractionRule.HEURISTICS:
        reserved += _spec_reserve_mib(speculative)
    value = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    label = (
        "v0.5.4-v0.5.10 heuristics" if rule is FractionRule.HEURISTICS else "main-2026 memory_hook"
    )
    text = f"{label}: round(({gpu_mem_mib} - {reserved:.0f}) / {gpu_mem_mib}, 3)"
    return FractionDefault(value, text, chunk, max_bs)
