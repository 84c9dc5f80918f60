"""How vLLM sizes its GPU KV cache, per version era.

  V0      v0.6 - v0.7   vllm/worker/worker.py Worker.determine_num_available_blocks:
                        blocks = (total x util - non_kv) // cache_block_size (all layers)
  V1 mid  v0.8 - v0.20  vllm/v1/worker/gpu_worker.py Worker.determine_available_memory:
                        available = total x util - (weights + torch peak + non-torch increase)
  V1      >= v0.21      the same minus the CUDA-graph estimate (profile_cudagraph_memory, on by
                        default since v0.21.0)
Blocks: vllm/v1/core/kv_cache_utils.py get_num_blocks (available // page_size // num_layers),
page bytes: vllm/v1/kv_cache_interface.py FullAttentionSpec / MLAAttentionSpec.real_page_size_bytes.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.spec.model import AttentionKind, KVGeometry
from kvtier.units import GiB

DEFAULT_BLOCK_SIZE = 16  # CUDA platform default (CacheConfig block_size)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
# SchedulerConfig max_num_batched_tokens for the OpenAI server on GPUs (V1, chunked prefill on).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# speculative methods whose draft is the checkpoint's own MTP layers (SpeculativeConfig.method)
MTP_METHODS = frozenset({"DEEPSEEK_MTP", "MTP", "QWEN3_NEXT_MTP", "ERNIE_MTP"})
FP8_DS_MLA_BYTES = 656  # per token per layer: 512 fp8 latent + 4 fp32 scales + 64 bf16 rope


class Worker(IntEnum):
    """Which worker sizes the cache, in the order the code changed."""

    V0 = 1  # v0.6 - v0.7: determine_num_available_blocks
    V1_MID = 2  # v0.8 - v0.20: determine_available_memory, CUDA graphs not budgeted
    V1 = 3  # >= v0.21: the CUDA-graph estimate is budgeted


class Era(NamedTuple):
    worker: Worker
    label: str

    @property
    def budgets_cuda_graphs(self) -> bool:
        return self.worker >= Worker.V1


V0_8 = Version.release_of(0, 8)
V0_21 = Version.release_of(0, 21)


def era_for(version: str | Version | None) -> Era:
    """The era a version falls in; no version means V1 >= v0.21 (graphs budgeted)."""
    if version is None:
        return Era(Worker.V1, "vLLM V1 >= v0.21 (default, pass --vllm-version)")
    v = version if isinstance(version, Version) else Version.parse(version, "vLLM")
    if v.is_main:
        return Era(Worker.V1, "vLLM main (V1, CUDA-graph estimate budgeted)")
    if v < V0_8:
        return Era(Worker.V0, f"vLLM {v} (V0 worker)")
    if v < V0_21:
        return Era(Worker.V1_MID, f"vLLM {v} (V1, CUDA graphs not budgeted)")
    return Era(Worker.V1, f"vLLM {v} (V1, CUDA-graph estimate budgeted)")


def page_bytes(kv: KVGeometry, tp: int, block_size: int, dtype: KVDtype) -> int:
    """Bytes of one block of one layer on one rank (real_page_size_bytes).

    Full attention: block x per-rank KV heads x (head_size + head_size_v) x dtype bytes.
    MLA: one latent head of kv_lora_rank + qk_rope_head_dim, not split by TP; fp8_ds_mla 656 B.
    """
    if kv.kind is AttentionKind.MLA:
        if dtype.name == "fp8_ds_mla":
            return block_size * FP8_DS_MLA_BYTES
        return block_size * (kv.kv_lora_rank + kv.qk_rope_head_dim) * dtype.element_bytes
    if dtype.name == "fp8_ds_mla":
        raise KvtierError("--kv-cache-dtype fp8_ds_mla applies to MLA models only")
    heads = kv.kv_heads_per_rank(tp)
    return block_size * heads * (kv.head_dim + kv.v_head_dim) * dtype.element_bytes


def available_gib(
    total: float,
    utilization: float,
    weights: float,
    activation: float,
    non_torch: float,
    cuda_graphs: float,
) -> float:
    """requested_memory - non_kv_cache_memory [- cudagraph_memory_estimate]."""
    return total * utilization - (weights + activation + non_torch + cuda_graphs)


def num_blocks(available_bytes: int, page: int, layers: int) -> int:
    """get_num_blocks: int(available // page_size // num_layers), never negative."""
    return max(available_bytes // page // layers, 0)


def blocks_in_gib(gib: float, page: int, layers: int) -> int:
    """`num_blocks` for a GiB figure (the form logs and ledgers carry it in)."""
    return num_blocks(int(gib * GiB), page, layers)


def blocks_per_request(max_model_len: int, block_size: int) -> int:
    return -(-max_model_len // block_size)


def no_memory_error() -> KvtierError:
    return KvtierError(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine (or use more GPUs)"
    )


def too_short_error(max_model_len: int, need_gib: float, have_gib: float, fits: int) -> KvtierError:
    """check_enough_kv_cache_memory's refusal, with the longest context that would fit."""
    return KvtierError(
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"{need_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
        f"memory ({have_gib:.2f} GiB). The estimated maximum model length is {fits}. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len`"
    )


# kv_cache_utils._get_kv_cache_groups_uniform_page_size: when the larger layer type has fewer than
# 1.5x the layers of the smaller, groups take the larger count (padding the smaller type).
GROUP_SIZE_SLACK = 1.5


class HybridLayout(NamedTuple):
    """How V1 groups full and sliding-window layers into shared block pools."""

    group_size: int
    full_groups: int
    local_groups: int
    padding_layers: int


def hybrid_layout(full_layers: int, local_layers: int) -> HybridLayout:
    """Groups of `group_size` layers of one type; each pool is shared by one layer per group."""
    low, high = sorted((full_layers, local_layers))
    size = high if high < low * GROUP_SIZE_SLACK else low
    full, local = -(-full_layers // size), -(-local_layers // size)
    return HybridLayout(size, full, local, (full + local) * size - full_layers - local_layers)


def hybrid_blocks_per_request(
    layout: HybridLayout, context: int, block_size: int, window: int, batched_tokens: int
) -> int:
    """Blocks one request of `context` tokens holds over all groups (max_memory_usage_bytes).

    Full groups keep every token; a sliding-window group keeps
    cdiv(min(window - 1 + max_num_batched_tokens, context), block) + 1 blocks.
    """
    local = -(-min(window - 1 + batched_tokens, context) // block_size) + 1
    full = blocks_per_request(context, block_size)
    return layout.full_groups * full + layout.local_groups * local
