"""Bytes of model weights one tensor-parallel rank holds, group by group.

Mirrors how SGLang and vLLM shard a checkpoint: TP-sharded groups are split evenly
(`ColumnParallelLinear` / `RowParallelLinear` / TP-sharded `FusedMoE`); the vocabulary of the
embedding and lm_head is first padded to a multiple of 64 (`VocabParallelEmbedding`,
`DEFAULT_VOCAB_PADDING_SIZE`); k/v projections stop shrinking once tp exceeds the KV heads
(`QKVParallelLinear` replicates heads); replicated groups are whole on every rank.
Quantized groups cost `Quantization.bytes_per_param`, the rest the model dtype's width
(`model.dtypes`).
The tensors engines derive while loading (`ModelSpec.load_buffers`) are itemised too, because
both engines' "weights" figure (SGLang `mem usage` at `Load weight end`, vLLM `Model loading
took`) is the device memory the load consumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.errors import KvtierError
from kvtier.model.description import ModelSpec
from kvtier.model.dtypes import dtype_bytes
from kvtier.model.params import (
    ATTENTION,
    ATTENTION_KV,
    ATTENTION_KV_FULL,
    EMBEDDING,
    LM_HEAD,
    MLA_ABSORBED,
    ROUTER_FP32,
)
from kvtier.units import gib

_VOCAB_PADDING = 64


@dataclass(frozen=True, slots=True)
class Splits:
    """The ranks three vocabulary- or head-split parts are cut over where an engine's rule moves
    them off the tensor-parallel group (None: over tp). `attention`: the attention projections
    (SGLang's DP attention, tp / dp, by model file); `embedding`: the input embedding's padded
    vocabulary (1: whole on every rank); `lm_head`: the LM head's. Which applies is the engine's
    rule, by model and release (engines/sglang/attention.py, embedding.py, lm_head.py)."""

    attention: int | None = None
    embedding: int | None = None
    lm_head: int | None = None


OVER_TP = Splits()  # every part over the tensor-parallel group


@dataclass(frozen=True, slots=True)
class GroupBytes:
    """One parameter group's share of a rank: its parameters there and their bytes."""

    name: str
    params_per_rank: int
    bytes_per_rank: int
    sharded: bool
    quantized: bool
    buffer: bool = False  # derived at load time, not a checkpoint parameter


@dataclass(frozen=True, slots=True)
class WeightBytes:
    """Weight bytes one TP rank holds; `groups` itemises them."""

    tp: int
    sharded_bytes: int
    replicated_bytes: int
    groups: tuple[GroupBytes, ...]

    @property
    def total_bytes(self) -> int:
        return self.sharded_bytes + self.replicated_bytes

    @property
    def total_gib(self) -> float:
        return gib(self.total_bytes)

    @property
    def param_bytes(self) -> int:
        """Checkpoint parameters only, without the load-time buffers."""
        return sum(g.bytes_per_rank for g in self.groups if not g.buffer)


def weight_bytes(
    spec: ModelSpec,
    tp: int,
    dtype: str | None = None,
    splits: Splits = OVER_TP,
) -> WeightBytes:
    """Per-rank weight bytes of `spec` at tensor parallelism `tp`.

    `dtype` overrides the config's dtype for unquantized groups (an engine's `--dtype`).
    `splits` moves the attention projections, the embedding or the LM head off `tp` (Splits).
    """
    if tp < 1:
        raise KvtierError(f"tensor parallel size must be >= 1, got {tp}")
    if spec.num_attention_heads % tp:
        raise KvtierError(
            f"tp {tp} does not divide the {spec.num_attention_heads} attention heads "
            f"of {spec.model_id}"
        )
    plain = dtype_bytes(dtype or spec.dtype)
    quant = spec.quantization
    padded_vocab = -(-spec.vocab_size // _VOCAB_PADDING) * _VOCAB_PADDING
    groups = []
    tagged = [(g, False) for g in spec.params] + [(g, True) for g in spec.load_buffers]
    heads_tp = splits.attention or tp
    for g, buffer in tagged:
        if not g.sharded:
            params = g.count
        elif g.name in (EMBEDDING, LM_HEAD):
            ranks = (splits.embedding if g.name == EMBEDDING else splits.lm_head) or tp
            params = -(-padded_vocab // ranks) * (g.count // spec.vocab_size)
        elif g.name == ATTENTION_KV:
            params = g.count // min(heads_tp, spec.kv.num_kv_heads)
        elif g.name == ATTENTION_KV_FULL:
            params = g.count // min(heads_tp, spec.kv.full_kv_heads)
        elif g.name in (ATTENTION, MLA_ABSORBED):
            params = g.count // heads_tp
        else:
            params = g.count // tp
        width = quant.bytes_per_param if g.quantized and quant else plain
        if g.name == ROUTER_FP32:
            width = 4
        groups.append(
            GroupBytes(g.name, params, round(params * width), g.sharded, g.quantized, buffer)
        )
    sharded = sum(g.bytes_per_rank for g in groups if g.sharded)
    replicated = sum(g.bytes_per_rank for g in groups if not g.sharded)
    return WeightBytes(tp, sharded, replicated, tuple(groups))
