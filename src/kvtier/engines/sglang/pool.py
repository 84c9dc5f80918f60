"""How SGLang sizes its GPU KV pool, rule by rule, per version era.

Eras (sgl-project/sglang, python/sglang/srt/):
  A  v0.3 - v0.4.x   model_executor/model_runner.py: ModelRunner.profile_max_num_token,
                     init_memory_pool
  B  v0.5.0 - v0.5.10 model_executor/model_runner_kv_cache_mixin.py: ModelRunnerKVCacheMixin
                     .get_cell_size_per_token, .profile_max_num_token, .init_memory_pool,
                     .set_num_tokens_hybrid_swa
  C  v0.5.11 - main  model_executor/pool_configurator.py DefaultPoolConfigurator (the draft
                     priced into the cell from v0.5.14, `draft_in_cell`); from v0.5.16
                     mem_cache/kv_cache_configurator.py KVCacheConfigurator._profile_available_bytes
The budget itself is the same in all three: what is free when the pool is allocated minus a
fixed share of what was free before the weights loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.sglang import versions
from kvtier.engines.sglang.versions import (
    V0_4_6,
    V0_4_7,
    V0_4_8,
    V0_4_9,
    V0_5_0,
    V0_5_3,
    V0_5_10,
    V0_5_14,
    V0_5_17,
    V0_5_18,
)
from kvtier.engines.version import Version
from kvtier.errors import DoesNotStart, KvtierError, Setting
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind
from kvtier.units import GiB

# memory_pool.py: FP4 pools keep one scale per 16 elements.
FP4_SCALE_BLOCK = 16
# DeepSeek sparse attention (DeepSeek-V3.2): the indexer keeps one fp8 key per token per layer with
# an fp32 scale per 128 elements, in a uint8 buffer (mem_cache/memory_pool.py
# NSATokenToKVPool / DSATokenToKVPool quant_block_size, index_k_with_scale_buffer_dtype).
DSA_QUANT_BLOCK = 128
DSA_SCALE_BYTES = 4
# An fp8_e4m3 DSA latent is stored as kv_lora_rank fp8 bytes, one fp32 scale per 128 of them and
# the rope part in bf16 (calculate_mla_kv_cache_dim, NSATokenToKVPool.rope_storage_dtype): 656 B
# a layer for DeepSeek-V3.2, where the raw latent is 576. The pool allocates that layout from
# v0.5.4 (its 'KV size' line prints it); the budget divides by it from v0.5.17, where
# pool_configurator.py _compute_cell_size calls calculate_mla_kv_cache_dim, and by the raw latent
# before (model_runner.py profile_max_num_token v0.5.4 - v0.5.9, get_cell_size_per_token
# v0.5.10 - v0.5.10.post1, _compute_cell_size v0.5.11 - v0.5.16).
DSA_ROPE_BYTES = 2
# server_args: a DSA model on CUDA runs with page size 64 ("Setting page size to 64 for DeepSeek
# DSA", v0.5.3 - v0.5.23) and, under `auto`, an fp8_e4m3 KV cache from compute capability 10.0,
# bfloat16 below (v0.5.4 inline; v0.5.5 - v0.5.14 _set_default_nsa_kv_cache_dtype; v0.5.20 -
# v0.5.23 arg_groups/overrides.py).
DSA_PAGE_SIZE = 64
DSA_FP8_CAPABILITY = (10, 0)
# server_args `swa_full_tokens_ratio` default (v0.5.x).
SWA_FULL_TOKENS_RATIO = 0.8
# req_to_token rows: context_len + 4 (model_runner init_memory_pool, extra_max_context_len).
REQ_TO_TOKEN_EXTRA = 4
REQ_TO_TOKEN_ELEMENT_BYTES = 4  # int32
# max_running_requests when speculative decoding is on and the flag is unset.
SPECULATIVE_MAX_RUNNING_REQUESTS = 48


class PoolEra(IntEnum):
    """How the pool is sized, in the order the code changed."""

    A = 1  # v0.3 - v0.4.x: model_runner.py profile_max_num_token / init_memory_pool
    B = 2  # v0.5.0 - v0.5.10: ModelRunnerKVCacheMixin
    C = 3  # v0.5.11+: pool_configurator.py (the draft priced into the cell from v0.5.14)


class FractionRule(IntEnum):
    """Which default `--mem-fraction-static` rule applies (see `defaults`), in order."""

    TP_TABLE = 1  # v0.3 - v0.4.5: a table by TP size
    CARD_TABLE = 2  # v0.4.6: the TP table up to 80 GiB cards, 13 GiB reserved above
    CARD_RESERVE = 3  # v0.4.7: the table by TP x PP, then per-card corrections
    RESERVE_TABLE = 4  # v0.4.8 - v0.5.2: reserved MiB by GPU memory class
    HEURISTICS = 5  # v0.5.3 - v0.5.9: reserve from chunk, CUDA-graph batch and TP x PP
    PIECEWISE = 6  # v0.5.10 - v0.5.13: the same plus the piecewise CUDA-graph reserve
    MEMORY_HOOK = 7  # v0.5.14 and later, main


class Era(NamedTuple):
    pool: PoolEra
    fraction_rule: FractionRule
    label: str
    version: Version  # the release whose rules apply (versions.DEFAULT.resolve)


_RULES = (  # (first release, rule, label), newest first
    (V0_5_14, FractionRule.MEMORY_HOOK, "v0.5.14+ memory settings"),
    (V0_5_10, FractionRule.PIECEWISE, "v0.5.10-v0.5.13 heuristics + piecewise CUDA graphs"),
    (V0_5_3, FractionRule.HEURISTICS, "v0.5.3-v0.5.9 heuristics"),
    (V0_4_8, FractionRule.RESERVE_TABLE, "v0.4.8-v0.5.2 reserve table"),
    (V0_4_7, FractionRule.CARD_RESERVE, "v0.4.7 TP x PP table with card corrections"),
    (V0_4_6, FractionRule.CARD_TABLE, "v0.4.6 TP table, 13 GiB reserve above 80 GiB"),
)


def era_for(version: str | Version | None) -> Era:
    """The era a version falls in (no version: `versions.DEFAULT`)."""
    v = versions.DEFAULT.resolve(version)
    if version is None:
        return Era(PoolEra.B, FractionRule.HEURISTICS, versions.DEFAULT.era_label, v)
    if v.is_main:
        return Era(PoolEra.C, FractionRule.MEMORY_HOOK, "SGLang main 2026 (Era C)", v)
    pool = PoolEra.A if v < V0_5_0 else PoolEra.B if v <= V0_5_10 else PoolEra.C
    rule, label = FractionRule.TP_TABLE, "v0.3-v0.4.5 TP table"
    for first, candidate, text in _RULES:
        if v >= first:
            rule, label = candidate, text
            break
    return Era(pool, rule, f"SGLang {v} (Era {pool.name}, {label})", v)


def cell_size(kv: KVGeometry, attn_tp: int, layers: int, dtype: KVDtype) -> int:
    """Bytes one token's KV takes on one rank over `layers` layers.

    Mirrors get_cell_size_per_token (Era B): MHA/GQA stores per-rank heads x (head_dim +
    v_head_dim); MLA stores one latent (kv_lora_rank + qk_rope_head_dim), not split by TP.
    FP4 halves the elements and adds one scale byte per 16 elements (K and V scales for MHA).
    A DSA model adds its indexer's key per layer (`dsa_indexer_bytes`; priced from v0.5.4:
    v0.5.3 allocated it without counting it); its fp8 latent layout is `dsa_pool_cell`'s.
    Gemma 4 (every layer, none split off by PP): each layer at its own shape (`swa.layer_cells`).
    """
    if not kv.is_uniform:
        if layers != kv.num_layers:
            raise KvtierError("a Gemma 4 cell over a share of its layers is not modelled")
        full, local = (
            kv.layer_elements(LayerKind.FULL, attn_tp),
            kv.layer_elements(LayerKind.SLIDING, attn_tp),
        )
        return (full * kv.num_full_layers + local * kv.num_local_layers) * dtype.element_bytes
    if kv.kind is AttentionKind.MLA:
        latent = kv.kv_lora_rank + kv.qk_rope_head_dim
        cell = latent * layers * dtype.element_bytes
        if dtype.is_fp4:
            cell = cell // 2 + (latent // FP4_SCALE_BLOCK) * layers * dtype.element_bytes
        return cell + dsa_indexer_bytes(kv) * layers
    heads = kv.kv_heads_per_rank(attn_tp)
    cell = heads * (kv.head_dim + kv.v_head_dim) * layers * dtype.element_bytes
    if dtype.is_fp4:
        scales = (heads * kv.head_dim * layers * 2 * dtype.element_bytes) // FP4_SCALE_BLOCK
        return cell // 2 + scales
    return cell


def dsa_indexer_bytes(kv: KVGeometry) -> int:
    """Bytes of the DSA indexer's key for one token in one layer (0 without an indexer):
    index_head_dim + index_head_dim // 128 x 4 (get_cell_size_per_token, v0.5.4 - v0.5.10;
    pool_configurator.py _compute_dsa_indexer_cell_size, v0.5.11 - v0.5.23)."""
    if not kv.index_head_dim:
        return 0
    return kv.index_head_dim + kv.index_head_dim // DSA_QUANT_BLOCK * DSA_SCALE_BYTES


def dsa_pool_cell(kv: KVGeometry, layers: int, dtype: KVDtype) -> int:
    """Bytes a DSA model's pool allocates for one token over `layers` (the 'KV size' it logs)."""
    if dtype.name != "fp8_e4m3":
        return cell_size(kv, 1, layers, dtype)
    scales = kv.kv_lora_rank // DSA_QUANT_BLOCK * DSA_SCALE_BYTES
    latent = kv.kv_lora_rank + scales + kv.qk_rope_head_dim * DSA_ROPE_BYTES
    return (latent + dsa_indexer_bytes(kv)) * layers


def prices_dsa_layout(version: Version) -> bool:
    """Whether the budget divides by the allocated DSA layout (v0.5.17 and later)."""
    return version >= V0_5_17


def dsa_kv_dtype(capability: tuple[int, int] | None) -> KVDtype:
    """The KV dtype `auto` resolves to for a DSA model; an unknown GPU counts as below 10.0."""
    if capability is not None and capability >= DSA_FP8_CAPABILITY:
        return KVDtype("fp8_e4m3", 1)
    return KVDtype("bfloat16", 2)


def draft_in_cell(era: Era) -> bool:
    """Whether the budget's cell carries an EAGLE / STANDALONE / MTP draft's KV: from v0.5.14
    DefaultPoolConfigurator multiplies the cell by (1 + draft layers / layers)
    (pool_configurator.py, v0.5.14 - v0.5.23); before, the draft worker's pool of the same
    token count comes out of the reserve (Era B and v0.5.11 - v0.5.13)."""
    return era.version >= V0_5_14


# environ.py SGLANG_VLM_CACHE_SIZE_MB default: the multimodal embedding cache
VLM_CACHE_MIB = 100


def multimodal_reserve_gib(era: Era, multimodal: bool) -> float:
    """GiB a multimodal model's KV budget gives up for the embedding cache allocated after the
    pool: kv_cache_configurator.py mm_runtime_reservation_gb, v0.5.18+ (the GPU feature-transport
    pool it adds is off unless --mm-feature-transport cuda_ipc / cuda_vmm)."""
    if not multimodal or era.version < V0_5_18:
        return 0.0
    return VLM_CACHE_MIB / 1024


def rest_gib(free_before_gib: float, free_after_gib: float, mem_fraction: float) -> float:
    """profile_max_num_token: rest = available_now - free_before_load * (1 - mem_fraction_static).

    `free_before_gib` is the min over ranks of the free memory after distributed init and before
    weights load (Era A/B call it total_gpu_memory, Era C pre_model_load_memory).
    """
    return free_after_gib - free_before_gib * (1.0 - mem_fraction)


def not_enough_memory(free_before_gib: float, free_after_gib: float) -> DoesNotStart:
    """The engine's refusal, with the fraction that would leave a positive pool (Era C wording)."""
    if free_after_gib <= 0:
        return DoesNotStart(
            f"Not enough memory: the weights ({free_before_gib - free_after_gib:.2f} GiB per GPU) "
            f"do not fit in the {free_before_gib:.2f} GiB free before load; use more GPUs "
            "(higher --tp / --pp) or a smaller checkpoint"
        )
    needed = 1.0 - free_after_gib / free_before_gib
    above = math.floor(needed * 1000 + 1) / 1000
    return DoesNotStart(
        "Not enough memory: the weights leave no GPU memory for the KV cache. Please increase "
        f"--mem-fraction-static above {needed:.3f} (1 - available/pre-load free)",
        tokens=0,
        would_start=Setting(
            "--mem-fraction-static", above, "the first fraction whose budget exceeds the weights"
        )
        if above < 1.0
        else None,
    )


def profile_tokens(rest: float, cell: int, page_size: int, max_total_tokens: int | None) -> int:
    """Era B: int(rest * 2**30) // cell, capped by --max-total-tokens, aligned down to a page."""
    tokens = int(rest * GiB) // cell
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    return tokens // page_size * page_size


class SwaTokens(NamedTuple):
    full_tokens: int
    swa_tokens: int


def hybrid_swa_tokens(
    profiled_tokens: int, kv: KVGeometry, attn_tp: int, page_size: int, ratio: float
) -> SwaTokens:
    """Era B set_num_tokens_hybrid_swa: split the profiled bytes between full and SWA layers.

    Profiled with the uniform cell over all layers; then full_tokens = bytes / (F*n_full +
    ratio*S*n_swa), swa_tokens = full_tokens * ratio, both page-aligned down.
    """
    per_layer = kv.kv_heads_per_rank(attn_tp) * (kv.head_dim + kv.v_head_dim)
    total = profiled_tokens * per_layer * kv.num_layers
    full = int(total / (per_layer * kv.num_full_layers + ratio * per_layer * kv.num_local_layers))
    swa = int(full * ratio)
    return SwaTokens(full // page_size * page_size, swa // page_size * page_size)


def check_layers(kv: KVGeometry, pp: int = 1, swa_pool: bool = False) -> None:
    """Refuse layer layouts whose SGLang pool formula kvtier does not reproduce."""
    if swa_pool and pp > 1:
        raise KvtierError("hybrid sliding-window pools under pipeline parallelism are not modelled")
    if kv.num_full_layers == 0:
        raise KvtierError("all-sliding-window models are not modelled for SGLang")


def kv_size_bytes(tokens: int, page_size: int, cell: int) -> int:
    """The 'KV size' the pool logs: buffers hold tokens + one padding page (memory_pool.py)."""
    return (tokens + page_size) * cell


def max_num_reqs(tokens: int, context_len: int, max_running_requests: int | None) -> int:
    """req_to_token pool rows (Era A/B init_memory_pool): the flag, or clamp(tokens/ctx*512)."""
    if max_running_requests is not None:
        return max_running_requests
    return min(max(int(tokens / context_len * 512), 2048), 4096)


def speculative_max_running_requests(speculative: str | None, era: Era) -> int | None:
    """48 when a draft-model speculative algorithm is on and the flag is unset (server_args
    v0.4.9+; 2026: arg_groups/speculative_hook.py); None otherwise."""
    if speculative is None or era.version < V0_4_9:
        return None
    if speculative.upper() in ("EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE"):
        return SPECULATIVE_MAX_RUNNING_REQUESTS
    return None


def req_to_token_bytes(num_reqs: int, context_len: int, draft_tokens: int) -> int:
    """ReqToTokenPool: int32 (num_reqs, context_len + 4 [+ draft tokens, Era B])."""
    width = context_len + REQ_TO_TOKEN_EXTRA + draft_tokens
    return num_reqs * width * REQ_TO_TOKEN_ELEMENT_BYTES


def max_running_requests(tokens: int, num_reqs: int, flag: int | None, dp: int) -> int:
    """model_runner (Era B): min(tokens // 2 or flag // dp, req_to_token pool size); `dp` is
    the DP-attention size (ModelRunner.dp_size: 1 without --enable-dp-attention)."""
    wanted = tokens // 2 if flag is None else flag // dp
    return min(wanted, num_reqs)


class RequestLimits(NamedTuple):
    rows: int  # req_to_token pool rows
    running: int  # the scheduler's max_running_requests


def request_limits(
    tokens: int, context_len: int, flag: int | None, dp: int, slot_cap: int | None = None
) -> RequestLimits:
    """The request table's rows and the running-request limit over a pool of `tokens`: rows
    are `max_num_reqs`, capped by the state slots of a hybrid linear-attention model
    (`slot_cap`, mamba.slot_request_cap; init_memory_pool / resolve_max_num_reqs), and the
    limit is `max_running_requests` over those rows. The one rule plan, explain and simulate
    read."""
    rows = max_num_reqs(tokens, context_len, flag)
    if slot_cap is not None:
        rows = min(rows, slot_cap)
    return RequestLimits(rows, max_running_requests(tokens, rows, flag, dp))


@dataclass(frozen=True, slots=True)
class DraftCell:
    """Bytes per token of the speculative draft's KV on one rank, and how it was found."""

    cell: int
    layers: int
    source: str
    exact: bool
