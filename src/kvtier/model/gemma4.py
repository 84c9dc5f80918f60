"""Gemma 4: sliding-window layers and full-attention layers of two KV shapes, and KV-shared layers.

The layer list is the config's `layer_types` (transformers `Gemma4TextConfig`: when absent, five
sliding layers then one full, the last layer forced to full attention). Both engines read one KV
shape per layer type:
- sliding layers: `num_key_value_heads` heads of `head_dim`;
- full layers: `global_head_dim`, and `num_global_key_value_heads` heads when
  `attention_k_eq_v` is set, else `num_key_value_heads` (vLLM models/gemma4.py
  Gemma4DecoderLayer, v0.20.0 - v0.21.0; SGLang utils/hf_transformers/config.py
  `_apply_gemma4_attention_overrides` through transformers' per-layer config, v0.5.23). SGLang
  v0.5.11 takes `num_global_key_value_heads` whenever the file states it, so a file stating it
  without `attention_k_eq_v` is refused: the engines disagree on its full layers' heads.
  A file without `global_head_dim` is refused too (vLLM falls back to `head_dim` where
  transformers defaults to 512).
- the last `num_kv_shared_layers` layers read the KV of the last earlier layer of their type and
  write none (vLLM `kv_sharing_target_layer_name`, SGLang `kv_shared_layer_index`).
Parameters follow the engines' modules (vLLM models/gemma4.py, SGLang models/gemma4_causal.py):
every layer builds a fused `qkv_proj` of its own shape, K and V slots included on the
`attention_k_eq_v` and KV-shared layers (vLLM loads K into both slots), q / k RMSNorms of the
layer's head width, four decoder RMSNorms and a dense MLP. `enable_moe_block` adds to every layer,
beside that MLP, `num_experts` experts of `moe_intermediate_size` (FusedMoE, `top_k_experts` a
token), a replicated router (`proj` hidden x experts, a `scale` of the hidden width, a
`per_expert_scale`) and three more RMSNorms (vLLM Gemma4Router / Gemma4MoE, SGLang the same
modules). Per-layer embeddings (`hidden_size_per_layer_input`) and the audio tower are not
counted: such files are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.errors import UnsupportedModel
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind, ParamGroup
from kvtier.model.params import (
    ATTENTION,
    ATTENTION_KV,
    ATTENTION_KV_FULL,
    DENSE_MLP,
    EMBEDDING,
    LM_HEAD,
    NORMS,
    ROPE_CACHE,
    ROUTED_EXPERTS,
    ROUTER,
    Groups,
)
from kvtier.model.quant import ModuleFilter

GEMMA4_ARCHITECTURES = frozenset({"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"})
# Gemma4TextConfig.__post_init__: five sliding layers then one full when layer_types is unstated
_DEFAULT_PATTERN = 6
_KINDS = {"sliding_attention": LayerKind.SLIDING, "full_attention": LayerKind.FULL}


def layer_kinds(text: Mapping[str, Any]) -> tuple[LayerKind, ...]:
    """Every decoder layer's kind, the last forced to full attention as transformers does."""
    n = int(text["num_hidden_layers"])
    types = text.get("layer_types")
    if types is None:
        types = [
            "full_attention" if (i + 1) % _DEFAULT_PATTERN == 0 else "sliding_attention"
            for i in range(n)
        ]
    if len(types) != n:
        raise UnsupportedModel(f"layer_types has {len(types)} entries for {n} layers")
    unknown = sorted({t for t in types if t not in _KINDS})
    if unknown:
        raise UnsupportedModel(f"unsupported Gemma 4 layer_types entry {unknown[0]!r}")
    return (*(_KINDS[t] for t in types[:-1]), LayerKind.FULL)


def _full_shape(text: Mapping[str, Any]) -> tuple[int, int]:
    """(KV heads, head width) of the full-attention layers."""
    if text.get("global_head_dim") is None:
        raise UnsupportedModel(
            "Gemma 4 config without `global_head_dim` (vLLM falls back to head_dim, "
            "transformers to 512)"
        )
    k_eq_v = bool(text.get("attention_k_eq_v"))
    global_heads = text.get("num_global_key_value_heads")
    if global_heads is not None and not k_eq_v:
        raise UnsupportedModel(
            "Gemma 4 config states `num_global_key_value_heads` without `attention_k_eq_v`: "
            "vLLM and SGLang >= v0.5.23 ignore it, SGLang v0.5.11 applies it"
        )
    heads = int(global_heads) if global_heads is not None else int(text["num_key_value_heads"])
    return heads, int(text["global_head_dim"])


def _shared_layers(text: Mapping[str, Any], kinds: tuple[LayerKind, ...]) -> int:
    """`num_kv_shared_layers`, checked: each shared layer needs an earlier layer of its type."""
    shared = int(text.get("num_kv_shared_layers") or 0)
    first = len(kinds) - shared
    if shared < 0 or first < 1:
        raise UnsupportedModel(f"num_kv_shared_layers {shared} of {len(kinds)} layers")
    if set(kinds[first:]) - set(kinds[:first]):
        raise UnsupportedModel("a Gemma 4 KV-shared layer has no earlier layer of its type")
    return shared


def gemma4_geometry(text: Mapping[str, Any]) -> KVGeometry:
    """The KV shape of every Gemma 4 decoder layer (module docstring)."""
    kinds = layer_kinds(text)
    window = text.get("sliding_window")
    if LayerKind.SLIDING in kinds and not window:
        raise UnsupportedModel("sliding-window layers without a `sliding_window` size")
    if text.get("use_bidirectional_attention") == "all":
        raise UnsupportedModel("Gemma 4 use_bidirectional_attention 'all' is not modelled")
    full_heads, full_width = _full_shape(text)
    head_dim = int(text["head_dim"])
    return KVGeometry(
        kind=AttentionKind.MHA,
        num_kv_heads=int(text["num_key_value_heads"]),
        head_dim=head_dim,
        v_head_dim=head_dim,
        layer_kinds=kinds,
        sliding_window=int(window) if window else None,
        full_kv_heads=full_heads,
        full_head_dim=full_width,
        kv_shared_layers=_shared_layers(text, kinds),
    )


def _refuse_uncounted(text: Mapping[str, Any]) -> None:
    if int(text.get("hidden_size_per_layer_input") or 0):
        raise UnsupportedModel(
            "Gemma 4 per-layer embeddings (hidden_size_per_layer_input) are not counted"
        )
    if text.get("use_double_wide_mlp") and int(text.get("num_kv_shared_layers") or 0):
        raise UnsupportedModel("Gemma 4 double-wide MLPs (use_double_wide_mlp) are not counted")


def gemma4_moe_layout(text: Mapping[str, Any]) -> tuple[list[bool], int, int, int]:
    """(per layer whether it runs the MoE block, experts, experts a token, shared experts)."""
    n = int(text["num_hidden_layers"])
    if not text.get("enable_moe_block"):
        return [False] * n, 0, 0, 0
    experts, top_k = text.get("num_experts"), text.get("top_k_experts")
    if not experts or not top_k or not text.get("moe_intermediate_size"):
        raise UnsupportedModel(
            "Gemma 4 enable_moe_block without num_experts, top_k_experts and moe_intermediate_size"
        )
    return [True] * n, int(experts), int(top_k), 0


def _moe_params(g: Groups, text: Mapping[str, Any], layer: str) -> int:
    """The routed experts and routers of the MoE layers; returns their three extra norms."""
    moe, experts, top_k, _ = gemma4_moe_layout(text)
    if not experts:
        return 0
    n, h = sum(moe), int(text["hidden_size"])
    per_expert = 3 * h * int(text["moe_intermediate_size"])
    module = f"{layer}.0.experts.down_proj"
    g.add(ROUTED_EXPERTS, n * experts * per_expert, True, module, active=n * top_k * per_expert)
    g.add(ROUTER, n * (h * experts + h + experts), False, f"{layer}.0.router.proj")
    return n * 3 * h


def gemma4_params(
    text: Mapping[str, Any], quantized: ModuleFilter, prefix: str
) -> tuple[ParamGroup, ...]:
    """Parameter groups of the Gemma 4 text decoder as the engines build it (docstring)."""
    _refuse_uncounted(text)
    kv = gemma4_geometry(text)
    h = int(text["hidden_size"])
    vocab = int(text["vocab_size"])
    heads = int(text["num_attention_heads"])
    inter = int(text["intermediate_size"])
    q_o = norms = 0
    kv_proj = {LayerKind.SLIDING: 0, LayerKind.FULL: 0}
    for kind in kv.layer_kinds:
        kv_heads = kv.full_kv_heads if kind is LayerKind.FULL else kv.num_kv_heads
        width = kv.full_head_dim if kind is LayerKind.FULL else kv.head_dim
        q_o += 2 * h * heads * width
        kv_proj[kind] += 2 * h * kv_heads * width
        norms += 4 * h + 2 * width  # four decoder norms, q_norm and k_norm (v_norm: no weight)
    layer = f"{prefix}model.layers"
    full = kv.layer_kinds.index(LayerKind.FULL)
    g = Groups(quantized)
    g.add(EMBEDDING, vocab * h, True, f"{prefix}model.embed_tokens", linear=False)
    g.add(ATTENTION, q_o, True, f"{layer}.0.self_attn.q_proj")
    g.add(ATTENTION_KV, kv_proj[LayerKind.SLIDING], True, f"{layer}.0.self_attn.k_proj")
    g.add(ATTENTION_KV_FULL, kv_proj[LayerKind.FULL], True, f"{layer}.{full}.self_attn.k_proj")
    g.add(DENSE_MLP, kv.num_layers * 3 * h * inter, True, f"{layer}.0.mlp.down_proj")
    norms += _moe_params(g, text, layer)
    g.add(NORMS, norms + h, False, f"{prefix}model.norm", linear=False)
    if not text.get("tie_word_embeddings", True):
        g.add(LM_HEAD, vocab * h, True, f"{prefix}lm_head")
    return tuple(g.groups)


def gemma4_rope_cache(text: Mapping[str, Any]) -> tuple[ParamGroup, ...]:
    """The two RoPE caches, one per layer type, each [max_position_embeddings, head width]:
    the full layers' `proportional` RoPE builds its cache over the whole head, zero-padding the
    dimensions it does not rotate (vLLM rotary_embedding/gemma4_rope.py, SGLang
    rotary_embedding/rope_variant.py Gemma4RotaryEmbedding: rotary_dim = head_size)."""
    kv = gemma4_geometry(text)
    widths = {kv.full_head_dim if k is LayerKind.FULL else kv.head_dim for k in kv.layer_kinds}
    cache = int(text["max_position_embeddings"]) * sum(widths)
    return (ParamGroup(ROPE_CACHE, cache, cache, False, False),)


def gemma4_vision_params(vision: Mapping[str, Any], text_hidden: int) -> int:
    """Gemma 4's vision tower and its projector (transformers Gemma4VisionModel,
    Gemma4MultimodalEmbedder): a bias-free patch projection, two learned position tables,
    blocks of q/k/v/o with q / k RMSNorms, a gated three-matrix MLP and four RMSNorms, then one
    matrix into the text model; `standardize` adds a bias and a scale of the hidden width."""
    h = int(vision["hidden_size"])
    layers = int(vision["num_hidden_layers"])
    inter = int(vision["intermediate_size"])
    patch = int(vision["patch_size"])
    heads = int(vision["num_attention_heads"])
    kv_heads = int(vision["num_key_value_heads"])
    hd = int(vision["head_dim"])
    embed = 3 * patch * patch * h + 2 * int(vision["position_embedding_size"]) * h
    attn = 2 * h * heads * hd + 2 * h * kv_heads * hd + 2 * hd
    block = attn + 3 * h * inter + 4 * h
    standardize = 2 * h if vision.get("standardize") else 0  # std_bias, std_scale buffers
    return embed + layers * block + standardize + h * text_hidden
