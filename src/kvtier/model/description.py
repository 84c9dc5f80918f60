"""What a model is, as far as memory is concerned: KV geometry and parameter groups.

These types are the contract between the spec layer (which builds them from a Hugging Face
`config.json` or a catalog entry) and everything above it (budget, logs, cache, sim).
Engine-specific byte counts (cell sizes, page sizes) live in `kvtier.engines`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kvtier.errors import UnsupportedModel


class AttentionKind(StrEnum):
    MHA = "mha"  # multi-head, grouped-query and multi-query: per-head K and V
    MLA = "mla"  # multi-head latent: one compressed latent per token per layer, not split by TP


class LayerKind(StrEnum):
    FULL = "full"
    SLIDING = "sliding"  # attends to the last `sliding_window` tokens
    CHUNKED = "chunked"  # attends within chunks of `attention_chunk_size` tokens (Llama 4)


class StateKind(StrEnum):
    """Which recurrent layer a hybrid model interleaves with attention."""

    GATED_DELTA_NET = "Gated DeltaNet"  # Qwen3-Next, Qwen3.5 / 3.6
    MAMBA2 = "Mamba2"  # Granite-4.0-H
    SHORT_CONV = "short-conv"  # LFM2


@dataclass(frozen=True, slots=True)
class LinearAttention:
    """Recurrent state of the layers of a hybrid model that keep no KV.

    Each keeps, per request, a causal-conv window of `conv_kernel - 1` positions over `conv_dim`
    channels and a state of `num_value_heads` x `value_head_dim` x `key_head_dim`, whatever the
    sequence length. Both engines size the three kinds with one shape (SGLang
    `Mamba2StateShape.create`, vLLM `MambaStateShapeCalculator`), read here as:
    Gated DeltaNet: key / value heads and head dims as named. Mamba2: `mamba_n_groups` as key
    heads of `mamba_d_state` (conv_dim = expand x hidden + 2 x groups x d_state), `mamba_n_heads`
    as value heads of `mamba_d_head`. Short conv: the `conv_dim` channels as value heads of
    width 1 and no key (key_head_dim 0: no SSM state).
    """

    layer_ids: tuple[int, ...]  # decoder layers that hold this state instead of KV
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_dtype: str | None = None  # the config's `mamba_ssm_dtype`; None: the file states none
    kind: StateKind = StateKind.GATED_DELTA_NET

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: query and key (key heads) plus value (value heads)."""
        keys = self.num_key_heads * self.key_head_dim
        return 2 * keys + self.num_value_heads * self.value_head_dim


@dataclass(frozen=True, slots=True)
class KVGeometry:
    """Per-layer KV shape of the attention layers that hold a KV cache.

    MHA/GQA: each layer stores `num_kv_heads` heads of K (`head_dim`) and V (`v_head_dim`).
    MLA: each layer stores one latent of `kv_lora_rank + qk_rope_head_dim` elements;
    `num_kv_heads` is 1, `head_dim` is that latent width and `v_head_dim` is 0.
    DSA (DeepSeek sparse attention, DeepSeek-V3.2): each MLA layer also caches one key of
    `index_head_dim` elements for its lightning indexer; the engines store it quantized
    (`kvtier.engines`). 0: no indexer.
    Hybrid linear-attention, Mamba2 and short-conv models: `layer_kinds` lists the attention
    layers only; the others hold the recurrent state `linear` describes.
    Gemma 4: `num_kv_heads` / `head_dim` are the sliding-window layers' shape and
    `full_kv_heads` / `full_head_dim` the full-attention layers' (0: the same); the last
    `kv_shared_layers` of `layer_kinds` read an earlier layer's KV and write none. Engines
    differ on whether they still allocate them (`kvtier.engines`), so the uniform per-layer
    helpers below refuse such a geometry (`is_uniform`).
    """

    kind: AttentionKind
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    layer_kinds: tuple[LayerKind, ...]
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    index_head_dim: int = 0
    # hybrid linear-attention models: the recurrent state of the layers `layer_kinds` leaves out
    linear: LinearAttention | None = None
    full_kv_heads: int = 0  # the full-attention layers' KV heads where they differ (Gemma 4)
    full_head_dim: int = 0  # the full-attention layers' K and V width where it differs
    kv_shared_layers: int = 0  # trailing layers that reuse an earlier layer's KV (Gemma 4)

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def num_full_layers(self) -> int:
        return sum(1 for k in self.layer_kinds if k is LayerKind.FULL)

    @property
    def num_local_layers(self) -> int:
        return self.num_layers - self.num_full_layers

    @property
    def is_hybrid(self) -> bool:
        return self.num_local_layers > 0

    @property
    def is_uniform(self) -> bool:
        """Whether every layer holds KV of one shape (all but Gemma 4)."""
        return not (self.full_kv_heads or self.full_head_dim or self.kv_shared_layers)

    @property
    def kv_holding_kinds(self) -> tuple[LayerKind, ...]:
        """The kinds of the layers that write KV: all but the trailing KV-shared ones."""
        return self.layer_kinds[: self.num_layers - self.kv_shared_layers]

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads one tensor-parallel rank holds; heads are replicated when tp > heads."""
        if self.kind is AttentionKind.MLA:
            return 1
        return max(1, self.num_kv_heads // tp)

    def elements_per_token_per_layer(self, tp: int) -> int:
        """KV elements one rank stores for one token in one layer (one shape in every layer)."""
        if not self.is_uniform:
            raise UnsupportedModel(
                "per-layer KV of two head sizes and KV-shared layers (Gemma 4) is modelled "
                "for the engines' pools only, not this command"
            )
        if self.kind is AttentionKind.MLA:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return self.kv_heads_per_rank(tp) * (self.head_dim + self.v_head_dim)

    def layer_elements(self, kind: LayerKind, tp: int) -> int:
        """KV elements one rank stores for one token in one MHA layer of `kind`: a Gemma 4
        full-attention layer its own heads and width, every other layer the base shape."""
        heads, width = self.num_kv_heads, self.head_dim
        if kind is LayerKind.FULL:
            heads = self.full_kv_heads or heads
            width = self.full_head_dim or width
        return max(1, heads // tp) * 2 * width


@dataclass(frozen=True, slots=True)
class ParamGroup:
    """A named block of parameters with how it is stored and split.

    `count` is the number of parameters in the checkpoint; `active` is how many of them one
    token touches (equal to `count` except for routed experts). `sharded` groups are split
    across tensor-parallel ranks; the rest are replicated on every rank. `quantized` groups are
    stored in the checkpoint's quantized format; the rest stay in the model dtype.
    """

    name: str
    count: int
    active: int
    sharded: bool
    quantized: bool


@dataclass(frozen=True, slots=True)
class Quantization:
    """Weight storage format: bits per weight plus per-group scale overhead."""

    method: str  # "none", "fp8", "int4", "awq", "gptq", "mxfp4", "nvfp4", ...
    bits: int
    group_size: int = 0  # 0: no per-group scales
    scale_bits: int = 0  # bits of one group scale (+ zero point when the format has one)

    @property
    def bytes_per_param(self) -> float:
        scales = self.scale_bits / self.group_size if self.group_size else 0.0
        return (self.bits + scales) / 8


@dataclass(frozen=True, slots=True)
class ModelSpec:
    model_id: str  # canonical Hugging Face id, or the path it was read from
    architecture: str  # first entry of `architectures`, e.g. "DeepseekV3ForCausalLM"
    kv: KVGeometry
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    context_length: int  # max_position_embeddings (after rope scaling where the config says so)
    dtype: str  # the dtype the engines load it in under --dtype auto, e.g. "bfloat16"
    quantization: Quantization | None
    params: tuple[ParamGroup, ...]
    num_experts: int = 0
    experts_per_token: int = 0
    draft_layers: int = 0  # num_nextn_predict_layers (MTP heads shipped with the checkpoint)
    multimodal: bool = False
    # the vision tower's num_hidden_layers / hidden_size as its config class reads them (None:
    # the class has no such field)
    vision_layers: int | None = None
    vision_hidden_size: int | None = None
    aliases: tuple[str, ...] = field(default=())
    # tensors the engines derive from the weights while loading (RoPE cos/sin cache, MLA
    # absorbed projections): not checkpoint parameters, but inside the engines' weight figure
    load_buffers: tuple[ParamGroup, ...] = field(default=())
    dtype_source: str = "config.json"  # where `dtype` came from, or how it was resolved
    # config fields the file leaves unstated, taken from transformers' defaults for its
    # model_type: "vocab_size=262208 (transformers.Gemma3TextConfig)"
    defaulted: tuple[str, ...] = field(default=())
    # MLP widths, for the engines' activation models: the dense layers' intermediate_size (0 when
    # every layer is MoE, or unknown), one routed expert's, and the shared experts per MoE layer
    intermediate_size: int = 0
    moe_intermediate_size: int = 0
    shared_experts: int = 0
    # ModelOpt's `kv_cache_quant_algo` (or `kv_cache_scheme`) as the checkpoint states it,
    # lowercased: the KV format the engines take for `--kv-cache-dtype auto`
    kv_cache_quant_algo: str | None = None

    @property
    def config_dtype(self) -> str:
        """The dtype config.json states, float32 where it states none (as both engines read it);
        `dtype` is what they run under --dtype auto on a current GPU."""
        return "float32" if "float32" in self.dtype_source else self.dtype

    @property
    def total_params(self) -> int:
        return sum(g.count for g in self.params)

    @property
    def active_params(self) -> int:
        return sum(g.active for g in self.params)
