"""A model's KV bytes per token read from the log itself, for a model kvtier cannot resolve.

Both engines print the pool's bytes next to its token count, so the bytes one token takes on
one GPU follow from the log, to the rounding of the printed GiB:

  SGLang  'KV Cache is allocated. #tokens: N, K size: a GB, V size: b GB' (or 'KV size: c GB'):
          the buffers hold (N + page) x cell bytes (memory_pool.py), each size to 2 decimals
  vLLM    'Available KV cache memory: A GiB' with 'GPU KV cache size: N tokens': N is whole
          blocks, N x cell <= A x 2^30 < (N + block) x cell (get_num_blocks); or the refusal
          '(X GiB KV cache is needed' for max_model_len L: cdiv(L, block) blocks
          (max_memory_usage_bytes)

Each engine reads its own bracket (`engines/<engine>/explain.py`); the pick inside it is shared.
The geometry stand-in is a `ModelSpec` with one KV head of that many bytes on every rank, so
the engine's own ledger builder computes the pool from it like from any model.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.logs.facts import Fact
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind, ModelSpec

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


def pick(
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


STAND_IN_ARCHITECTURE = "unknown (KV geometry from the log)"


def stand_in(
    name: str, geometry: LogGeometry, element_bytes: int, dtype: str, context: int
) -> ModelSpec:
    """A model whose only known property is its KV bytes per token per GPU (one head on every
    rank, so no tensor-parallel split applies again)."""
    width = max(1, geometry.bytes_per_token // element_bytes)
    kv = KVGeometry(AttentionKind.MHA, 1, width, 0, (LayerKind.FULL,))
    return ModelSpec(
        model_id=name,
        architecture=STAND_IN_ARCHITECTURE,
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
