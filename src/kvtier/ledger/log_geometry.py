"""A model's KV bytes per token read from the log itself, for a model kvtier cannot resolve.

Both engines print the pool's bytes next to its token count, so the bytes one token takes on
one GPU follow from the log, to the rounding of the printed GiB:

  SGLang  'KV Cache is allocated. #tokens: N, K size: a GB, V size: b GB' (or 'KV size: c GB'):
          the buffers hold (N + page) x cell bytes (memory_pool.py), each size to 2 decimals
  vLLM    'Available KV cache memory: A GiB' with 'GPU KV cache size: N tokens': N is whole
          blocks, N x cell <= A x 2^30 < (N + block) x cell (get_num_blocks); or the refusal
          '(X GiB KV cache is needed' for max_model_len L: cdiv(L, block) blocks
          (max_memory_usage_bytes)

The geometry stand-in is a `ModelSpec` with one KV head of that many bytes on every rank, so
the engine's own ledger builder computes the pool from it like from any model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtier.engines.sglang.log import SGLangStartup
from kvtier.engines.vllm.log import VllmStartup
from kvtier.logs.facts import Fact
from kvtier.spec.model import AttentionKind, KVGeometry, LayerKind, ModelSpec
from kvtier.units import GiB

HALF = 0.005  # both engines print GiB with two decimals


@dataclass(frozen=True, slots=True)
class LogGeometry:
    """Bytes of KV one token takes on one GPU, as the log's figures bound it."""

    bytes_per_token: int  # the pick inside [low, high]
    low: int
    high: int
    line: Fact[object]  # the line the figures came from
    how: str

    def fits(self, cell: int) -> bool:
        return self.low <= cell <= self.high


def from_log(
    startup: SGLangStartup | VllmStartup, page: int, element_bytes: int
) -> LogGeometry | None:
    """The bytes-per-token bracket the log's pool figures allow, or None if it prints none."""
    if isinstance(startup, SGLangStartup):
        return _sglang(startup, page, element_bytes)
    return _vllm(startup, page, element_bytes)


def _sglang(s: SGLangStartup, page: int, element_bytes: int) -> LogGeometry | None:
    pools = [p for p in s.target_pools if p.tokens and p.total_gib is not None]
    if not pools:
        return None
    pool = min(pools, key=lambda p: p.tokens or 0)
    assert pool.tokens is not None and pool.total_gib is not None
    half = HALF if pool.kv_gib is not None else 2 * HALF  # K and V rounded apart
    cells = pool.tokens + page
    low = math.ceil(max(pool.total_gib - half, 0.0) * GiB / cells)
    high = math.floor((pool.total_gib + half) * GiB / cells)
    how = f"KV size {pool.total_gib:.2f} GiB / (#tokens {pool.tokens:,} + page {page})"
    return _pick(low, high, element_bytes, pool.fact(pool.tokens), how)


def _vllm(v: VllmStartup, block: int, element_bytes: int) -> LogGeometry | None:
    if v.needed_kv is not None:
        length, needed, half = v.needed_kv.value
        tokens = -(-length // block) * block
        low = math.ceil((needed - half) * GiB / tokens)
        high = math.floor((needed + half) * GiB / tokens)
        how = f"{needed:.2f} GiB needed for max_model_len {length:,} ({tokens:,} tokens in blocks)"
        return _pick(low, high, element_bytes, v.needed_kv, how)
    available = v.available_kv()
    count = v.kv_tokens
    if count is None and v.gpu_blocks is not None:
        count = Fact(v.gpu_blocks.value * block, v.gpu_blocks.line, v.gpu_blocks.text)
    if available is None or count is None or count.value <= 0:
        return None
    low = math.ceil((available.value - HALF) * GiB / (count.value + block))
    high = math.floor((available.value + HALF) * GiB / count.value)
    how = f"available {available.value:.2f} GiB / {count.value:,} tokens (whole blocks of {block})"
    return _pick(low, high, element_bytes, count, how)


def _pick(
    low: int, high: int, element_bytes: int, line: Fact[object], how: str
) -> LogGeometry | None:
    """The value in [low, high] with the most factors of two (KV rows are heads x head_dim x
    layers x dtype bytes, power-of-two multiples in practice), nearest the middle on a tie."""
    low = max(low, element_bytes)
    if high < low:
        return None
    middle = (low + high) / 2
    for bit in range(high.bit_length(), -1, -1):
        step = 1 << bit
        first = -(-low // step) * step
        if first <= high and step % element_bytes == 0:
            best = min(range(first, high + 1, step), key=lambda c: abs(c - middle))
            return LogGeometry(best, low, high, line, how)
    return None


def stand_in(
    name: str, geometry: LogGeometry, element_bytes: int, dtype: str, context: int
) -> ModelSpec:
    """A model whose only known property is its KV bytes per token per GPU (one head on every
    rank, so no tensor-parallel split applies again)."""
    width = max(1, geometry.bytes_per_token // element_bytes)
    kv = KVGeometry(AttentionKind.MHA, 1, width, 0, (LayerKind.FULL,))
    return ModelSpec(
        model_id=name,
        architecture="unknown (KV geometry from the log)",
        kv=kv,
        num_hidden_layers=1,
        hidden_size=0,
        num_attention_heads=0,
        vocab_size=0,
        context_length=context,
        dtype=dtype,
        quantization=None,
        params=(),
        dtype_source="assumed",
    )


def with_bytes(geometry: LogGeometry, cell: int) -> LogGeometry:
    """The same bracket with another pick (a corner of the range)."""
    return LogGeometry(cell, geometry.low, geometry.high, geometry.line, geometry.how)
