"""The device memory SGLang's weights take: their tensors in the CUDA caching allocator's segments.

SGLang logs `Load weight end ... mem usage` as the fall in free memory across load_model
(model_runner.py: get_available_gpu_memory after torch.cuda.empty_cache, i.e. cudaMemGetInfo),
and its KV budget subtracts that figure. Free memory falls by whole allocator segments, not by
tensor bytes (PyTorch c10/cuda/CUDACachingAllocator.cpp): a request rounds up to 512 B; up to
1 MiB it is served from 2 MiB segments, up to 10 MiB from 20 MiB ones, and a larger one gets a
segment of its own rounded up to 2 MiB; a free remainder of more than 1 MiB serves a later
request best-fit (the large pool; small requests never use it).

The tensors, in the order SGLang's dense decoders create them (models/llama.py, qwen2.py,
qwen3.py): the VocabParallelEmbedding shard, then per layer QKVParallelLinear, RowParallelLinear
o_proj (the first layer's get_rope cos/sin cache next), MergedColumnParallelLinear gate_up_proj,
RowParallelLinear down_proj, and the lm_head shard last. Norms and biases (at most a few MiB,
all in the small pool) are left out; so are other architectures and quantized checkpoints,
whose tensors kvtier does not list: for them `rounding_bytes` is None.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtier.model.description import AttentionKind, ModelSpec
from kvtier.model.dtypes import dtype_bytes
from kvtier.model.params import EMBEDDING, LM_HEAD, ROPE_CACHE
from kvtier.model.weights import OVER_TP, Splits, weight_bytes
from kvtier.units import MiB

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 * MiB  # kSmallSize: the small pool's largest request
SMALL_BUFFER = 2 * MiB  # kSmallBuffer
LARGE_BUFFER = 20 * MiB  # kLargeBuffer: the segment for requests below kMinLargeAlloc
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE = 2 * MiB  # kRoundLarge

DENSE_DECODERS = frozenset(
    {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
)


def segment_bytes(sizes: Iterable[int]) -> int:
    """Bytes of the segments the caching allocator reserves for `sizes`, allocated in order and
    never freed."""
    free: dict[bool, list[int]] = {True: [], False: []}  # small pool?, free block sizes
    reserved = 0
    for size in sizes:
        size = max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)
        small = size <= SMALL_SIZE
        blocks = free[small]
        fitting = [b for b in blocks if b >= size]
        if fitting:
            block = min(fitting)
            blocks.remove(block)
        else:
            if small:
                block = SMALL_BUFFER
            elif size < MIN_LARGE_ALLOC:
                block = LARGE_BUFFER
            else:
                block = -(-size // ROUND_LARGE) * ROUND_LARGE
            reserved += block
        rest = block - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
            blocks.append(rest)
    return reserved


def dense_tensors(
    model: ModelSpec,
    tp: int,
    splits: Splits = OVER_TP,
) -> list[int] | None:
    """Bytes of each large tensor one rank creates, in creation order (None: not a dense,
    unquantized decoder kvtier lists the tensors of); `splits` as `weight_bytes` takes them."""
    kv = model.kv
    if (
        model.architecture not in DENSE_DECODERS
        or model.quantization is not None
        or model.num_experts
        or kv.kind is AttentionKind.MLA
        or not model.intermediate_size
    ):
        return None
    width = dtype_bytes(model.dtype)
    hidden = model.hidden_size
    heads_tp = splits.attention or tp
    q = model.num_attention_heads // heads_tp * kv.head_dim
    k_v = kv.kv_heads_per_rank(heads_tp) * (kv.head_dim + kv.v_head_dim)
    mlp = model.intermediate_size // tp
    weights = weight_bytes(model, tp, splits=splits)
    groups = {g.name: g.bytes_per_rank for g in weights.groups}
    layer = [(q + k_v) * hidden * width, hidden * q * width]
    sizes = [groups[EMBEDDING]]
    for i in range(model.num_hidden_layers):
        sizes += layer
        if i == 0 and ROPE_CACHE in groups:
            sizes.append(groups[ROPE_CACHE])
        sizes += [2 * mlp * hidden * width, hidden * mlp * width]
    if LM_HEAD in groups:
        sizes.append(groups[LM_HEAD])
    return sizes


def rounding_bytes(
    model: ModelSpec,
    tp: int,
    pp: int,
    splits: Splits = OVER_TP,
) -> int | None:
    """Segment bytes beyond the tensors' own bytes on one rank (None: not modelled here)."""
    sizes = dense_tensors(model, tp, splits) if pp == 1 else None
    if sizes is None:
        return None
    return segment_bytes(sizes) - sum(sizes)
