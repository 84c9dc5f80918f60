"""SGLang's default `--mem-fraction-static`, `chunked_prefill_size` and `cuda_graph_max_bs`.

`gpu_mem_mib` is what server_args reads: get_nvgpu_memory_capacity() / get_device_memory_capacity(),
the minimum over visible GPUs of `nvidia-smi --query-gpu=memory.total` in MiB.

Rules (`pool.FractionRule`; python/sglang/srt/server_args.py unless noted), checked against the
released wheels by tests/test_oracle_sglang.py:
  TP_TABLE       v0.3 - v0.4.5   ServerArgs.__post_init__: a table by tp_size
  CARD_TABLE     v0.4.6          __post_init__: the table up to 81,920 MiB, (gpu - 13 GiB) / gpu
                                 (unrounded) above
  CARD_RESERVE   v0.4.7          __post_init__: the table by tp x pp; 0.79 above 180,000 MiB, at
                                 most (gpu - 18 GiB (20 with a draft)) / gpu above 96 GiB, x0.95
                                 with a draft on smaller cards
  RESERVE_TABLE  v0.4.8 - v0.5.2 __post_init__: reserved MiB by GPU memory class (+2 GiB with a
                                 draft, +6 GiB STANDALONE from v0.5.2, +4 GiB DP attention);
                                 v0.4.9 x0.90 for multimodal models
  HEURISTICS     v0.5.3 - v0.5.9 _handle_gpu_memory_settings: 512 + 1.5 x max(chunk, 2048)
                                 + 2 x max_bs + tp x pp / 8 x 1024 MiB (+ DP attention), floor
                                 10 GiB above 60 GiB, then +2 GiB draft / +6 GiB STANDALONE
  PIECEWISE      v0.5.10-v0.5.13 the same plus the piecewise CUDA-graph reserve (8 MiB per
                                 captured size, 1.5 GiB for MLA; off with a draft in v0.5.10),
                                 +4 GiB for a draft
  MEMORY_HOOK    v0.5.14+, main  _handle_gpu_memory_settings (v0.5.14-v0.5.18), then
                                 arg_groups/memory_hook.py: see `memory_settings`
From v0.4.10 multimodal models then go through adjust_mem_fraction_for_vlm (`vlm_factor`).
"""

from __future__ import annotations

from typing import NamedTuple

from kvtier.engines.deployment import Deployment
from kvtier.engines.sglang.memory_settings import (
    MAX_PREFILL_TOKENS,
    memory_settings,
    prefill_capture_sizes,
    tier,
)
from kvtier.engines.sglang.pool import (
    FractionRule,
    era_for,
)
from kvtier.engines.sglang.versions import V0_4_9, V0_4_10, V0_5_2, V0_5_11, V0_5_13
from kvtier.engines.version import Version
from kvtier.model.description import AttentionKind, ModelSpec

STANDALONE = "STANDALONE"
NGRAM = "NGRAM"
# adjust_mem_fraction_for_vlm: getattr defaults and the ViT-L/14 baseline
VIT_DEFAULT_LAYERS = 24
VIT_DEFAULT_HIDDEN = 1024


_LABELS = {
    FractionRule.HEURISTICS: "v0.5.3-v0.5.9 heuristics",
    FractionRule.PIECEWISE: "v0.5.10-v0.5.13 heuristics + piecewise CUDA graphs",
}


class FractionDefault(NamedTuple):
    value: float
    rule: str  # the rule and its arithmetic, for the ledger's inputs
    chunked_prefill_size: int | None  # what server_args sets (None: left unset)
    cuda_graph_max_bs: int | None


def _tp_table(size: int) -> float:
    """The v0.3-v0.4.7 table (by tp_size, by tp_size x pp_size in v0.4.7)."""
    for least, value in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if size >= least:
            return value
    return 0.88


def _has_draft(speculative: str | None) -> bool:
    return speculative is not None


def _spec_reserve(speculative: str | None, v: Version, rule: FractionRule) -> float:
    """MiB reserved for a draft model and its CUDA graphs."""
    if speculative is None:
        return 0
    name = speculative.upper()
    if name == STANDALONE and v >= V0_5_2:
        return 6 * 1024
    if name == NGRAM and rule >= FractionRule.HEURISTICS:
        return 0
    return 4 * 1024 if rule is FractionRule.PIECEWISE else 2 * 1024


def vlm_factor(model: ModelSpec) -> float:
    """adjust_mem_fraction_for_vlm (v0.4.10+): 0.95 x clamp(1 - 0.1 x (L x H^2 / (24 x 1024^2) - 1),
    0.8, 1.05) over the vision tower's num_hidden_layers L and hidden_size H."""
    layers = model.vision_layers or VIT_DEFAULT_LAYERS
    hidden = model.vision_hidden_size or VIT_DEFAULT_HIDDEN
    ratio = layers * (hidden**2) / (VIT_DEFAULT_LAYERS * (VIT_DEFAULT_HIDDEN**2))
    dynamic = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return 0.95 * dynamic


def _old_chunk_and_bs(rule: FractionRule, gpu: int | None, tp: int) -> tuple[int, int | None]:
    """__post_init__ v0.3-v0.5.2: chunked_prefill_size, cuda_graph_max_bs (None: unset, the
    CUDA-graph runner's own range applies)."""
    if rule >= FractionRule.RESERVE_TABLE:  # v0.4.8 - v0.5.2
        small = gpu is not None and gpu < 35 * 1024
        chunk = 4096 if gpu is None else 2048 if small else 8192 if gpu < 160 * 1024 else 16384
        return chunk, (8 if tp < 4 else 80) if small else None
    small = gpu is not None and gpu < 25_000
    if rule is FractionRule.CARD_RESERVE and gpu is not None and gpu > 180_000:
        chunk = 16384
    else:
        chunk = 2048 if small else 8192
    if small:
        return chunk, 8 if tp < 4 else 80
    return chunk, 160 if rule is FractionRule.TP_TABLE else None


def _piecewise_mib(d: Deployment, model: ModelSpec, chunk: int, v: Version, rocm: bool) -> float:
    """v0.5.10-v0.5.13 reserve for piecewise CUDA graphs, unless _handle_piecewise_cuda_graph
    turns them off (DP attention, PP, multimodal, hierarchical cache, non-CUDA hardware such as
    ROCm; a draft until v0.5.10)."""
    if (
        rocm
        or (d.speculative_algorithm is not None and v < V0_5_11)
        or d.enable_dp_attention
        or d.pp > 1
        or model.multimodal
        or d.hicache.enable
    ):
        return 0
    if model.kv.kind is AttentionKind.MLA:
        return 1.5 * 1024
    max_tokens = chunk
    if d.max_total_tokens is not None:
        max_tokens = min(max_tokens, d.max_total_tokens)
    if "llama-2" in d.model.lower():
        max_tokens = min(max_tokens, 4096)
    if v >= V0_5_13 and d.context_length is not None:
        max_tokens = min(max_tokens, d.context_length)
    return prefill_capture_sizes(max_tokens) * 8


def _reserve_rule(
    rule: FractionRule,
    v: Version,
    gpu: int,
    d: Deployment,
    model: ModelSpec,
    tiers: tuple[int, int],
    rocm: bool,
) -> tuple[float, str]:
    """Reserved MiB of the v0.5.3+ heuristics, in the engine's order of additions."""
    chunk, bs = tiers
    reserved: float = 512
    reserved += max(chunk if chunk > 0 else MAX_PREFILL_TOKENS, 2048) * 1.5
    reserved += bs * 2
    reserved += d.tp * d.pp / 8 * 1024
    if d.enable_dp_attention:
        reserved += bs * d.dp * 3
        if bs > 300:
            reserved += bs * d.dp * 1.5
    if rule is FractionRule.PIECEWISE:
        reserved += _piecewise_mib(d, model, chunk, v, rocm)
    if gpu > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    reserved += _spec_reserve(d.speculative_algorithm, v, rule)
    return reserved, f"round(({gpu} - {reserved:.0f}) / {gpu}, 3)"


def _reserve_table(gpu: int, d: Deployment, v: Version) -> float:
    """v0.4.8-v0.5.2 reserved MiB by GPU class (the H20 and H200 rows share a formula)."""
    parallel_size = d.tp * d.pp
    if gpu < 35 * 1024:  # T4, 4080 and A10, L40, 4090, 5090 share the formula
        reserved = (2.8 + parallel_size / 10) * 1024
    elif gpu < 90 * 1024:
        reserved = (9.5 + parallel_size / 2) * 1024
    elif gpu < 160 * 1024:
        reserved = (12 + parallel_size / 2) * 1024
    else:
        reserved = 32 * 1024
    reserved += _spec_reserve(d.speculative_algorithm, v, FractionRule.RESERVE_TABLE)
    if d.enable_dp_attention:
        reserved += 4 * 1024
    return reserved


def _card_reserve(gpu: int | None, d: Deployment, rocm: bool) -> tuple[float, str]:
    """v0.4.7: the table by tp x pp (0.88 above 80 GiB), then per-card corrections (the 0.79
    above 180,000 MiB only where is_cuda())."""
    value = _tp_table(d.tp * d.pp) if gpu is not None and gpu <= 81920 else 0.88
    if gpu is not None and gpu > 180 * 1000 and not rocm:
        return 0.79, "v0.4.7: cards above 180,000 MiB -> 0.79"
    if gpu is not None and gpu > 96 * 1024:
        reserve = 1024 * (20 if _has_draft(d.speculative_algorithm) else 18)
        value = min(value + 48 * 1024 * (1 - value) / gpu, (gpu - reserve) / gpu)
        return value, f"v0.4.7: min(table + 48 GiB x (1 - table) / {gpu}, 1 - {reserve} / {gpu})"
    if _has_draft(d.speculative_algorithm):
        return value * 0.95, "v0.4.7: TP x PP table x 0.95 (speculative)"
    return value, f"v0.4.7: TP x PP table, tp x pp = {d.tp * d.pp}"


def default_mem_fraction(
    version: str | Version | None,
    gpu_mem_mib: int | None,
    d: Deployment,
    model: ModelSpec,
    rocm: bool = False,
) -> FractionDefault:
    """The fraction, chunk and CUDA-graph batch SGLang picks for `d` when the flags are unset;
    `rocm`: its ROCm build (is_hip(), not is_cuda()) on an AMD card."""
    era = era_for(version)
    rule = era.fraction_rule
    v = era.version
    gpu = gpu_mem_mib
    given_chunk, given_bs = d.chunked_prefill_size, d.cuda_graph_max_bs
    if rule < FractionRule.HEURISTICS:
        tier_chunk, tier_bs = _old_chunk_and_bs(rule, gpu, d.tp)
        chunk = given_chunk if given_chunk is not None else tier_chunk
        max_bs = given_bs if given_bs is not None else tier_bs
        if rule is FractionRule.TP_TABLE or (rule is FractionRule.CARD_TABLE and gpu is None):
            value = _tp_table(d.tp)
            text = f"v0.3-v0.4.6 TP table: tp={d.tp} -> {value}"
        elif rule is FractionRule.CARD_TABLE:
            assert gpu is not None
            value = _tp_table(d.tp) if gpu <= 81920 else (gpu - 1024 * 13) / gpu
            text = f"v0.4.6: TP table up to 81,920 MiB, (gpu - 13 GiB) / gpu above: {gpu} MiB"
        elif rule is FractionRule.CARD_RESERVE:
            value, text = _card_reserve(gpu, d, rocm)
        elif gpu is None:
            value, text = 0.88, "v0.4.8-v0.5.2 reserve table: GPU memory unknown -> 0.88"
        else:
            reserved = _reserve_table(gpu, d, v)
            value = round((gpu - reserved) / gpu, 3)
            text = f"v0.4.8-v0.5.2 reserve table: round(({gpu} - {reserved:.0f}) / {gpu}, 3)"
    elif rule is FractionRule.MEMORY_HOOK:
        value, text, chunk, max_bs = memory_settings(v, gpu, d, model, rocm)
    else:
        tier_chunk, tier_bs = tier(gpu, d.tp, v)
        chunk = given_chunk if given_chunk is not None else tier_chunk
        max_bs = given_bs if given_bs is not None else tier_bs
        if gpu is None:
            value = 0.88
            text = f"{rule.name.lower()} rule: GPU memory unknown -> {value}"
        else:
            reserved, arithmetic = _reserve_rule(rule, v, gpu, d, model, (chunk, max_bs), rocm)
            value = round((gpu - reserved) / gpu, 3)
            text = f"{_LABELS[rule]}: {arithmetic}"
    if model.multimodal and rule >= FractionRule.RESERVE_TABLE:
        if v >= V0_4_10:
            factor = vlm_factor(model)
            value *= factor
            text += f"; x {factor:.4f} adjust_mem_fraction_for_vlm"
        elif v >= V0_4_9:
            value *= 0.90
            text += "; x 0.90 multimodal"
    return FractionDefault(value, text, chunk, max_bs)
