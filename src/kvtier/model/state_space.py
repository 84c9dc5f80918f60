"""Hybrid decoders whose other layers are Mamba2 (Granite-4.0-H) or short convolutions (LFM2).

Which layers hold KV is read from the config's layer list:
- `GraniteMoeHybridForCausalLM`: `layer_types`, "mamba" / "attention" (transformers 5 writes
  "linear_attention" / "full_attention"). The two engines' classes disagree on a file without
  it (transformers: every layer Mamba2; SGLang's own `GraniteMoeHybridConfig`: every sixth
  layer attention), so such a file is refused. A file without a Mamba2 layer (Granite-4.0
  Micro) is a plain decoder: SGLang's `mamba2_config` returns None for it.
- `Lfm2ForCausalLM`: `layer_types`, "full_attention" / "conv" ("short_conv" too in SGLang's
  `Lfm2Config.linear_layer_ids`), else `full_attn_idxs` (transformers `Lfm2Config`).

The recurrent state is the shape `LinearAttention` documents: Mamba2 from `mamba_n_groups`,
`mamba_d_state`, `mamba_n_heads`, `mamba_d_head` and `mamba_d_conv` (SGLang
`GraniteMoeHybridConfig.mamba2_cache_params`, vLLM `GraniteMoeHybridForCausalLM
.get_mamba_state_shape_from_config`); short conv from `hidden_size` and `conv_L_cache` (SGLang
`Lfm2Config.mamba2_cache_params` passes hidden_size, vLLM `Lfm2ForCausalLM` passes the file's
`conv_dim`: a file where they differ is refused). Parameters follow vLLM's modules
(`models/granitemoehybrid.py`, `models/lfm2.py`, `layers/mamba/mamba_mixer2.py`,
`layers/mamba/short_conv.py`; v0.24.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.errors import UnsupportedModel
from kvtier.model import params
from kvtier.model.description import LayerKind, LinearAttention, ParamGroup, StateKind
from kvtier.model.params import Groups
from kvtier.model.quant import ModuleFilter

GRANITE_HYBRID = "GraniteMoeHybridForCausalLM"
LFM2 = "Lfm2ForCausalLM"
STATE_SPACE_ARCHITECTURES = frozenset({GRANITE_HYBRID, LFM2})
MAMBA_MIXER = "mamba_mixer"  # in_proj, conv1d, dt_bias / A / D, gated norm, out_proj
SHORT_CONV = "short_conv"  # in_proj (B, C, x), depthwise conv, out_proj
_LAYER_WORDS = {
    GRANITE_HYBRID: {
        "mamba": True,
        "linear_attention": True,
        "attention": False,
        "full_attention": False,
    },
    LFM2: {"conv": True, "short_conv": True, "full_attention": False},
}


# fields transformers' GraniteMoeHybridConfig and SGLang's own class (configs/granitemoehybrid.py,
# v0.5.9 - v0.5.23) default differently: a file must state them
_GRANITE_STATED = (
    "num_key_value_heads",
    "mamba_n_heads",
    "mamba_d_head",
    "mamba_d_state",
    "num_local_experts",
    "shared_intermediate_size",
    "tie_word_embeddings",
)


def _positive(text: Mapping[str, Any], name: str) -> int:
    value = text[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UnsupportedModel(f"`{name}` must be an integer >= 1, got {value!r}")
    return value


def _recurrent(arch: str, text: Mapping[str, Any], n: int) -> tuple[bool, ...]:
    """Per decoder layer whether it keeps recurrent state instead of KV."""
    types = text.get("layer_types")
    if types is None and arch == LFM2:
        full = text.get("full_attn_idxs")
        return tuple(full is not None and i not in set(full) for i in range(n))
    if types is None:
        raise UnsupportedModel(
            f"{arch} config without `layer_types` (transformers and SGLang read it differently)"
        )
    if len(types) != n:
        raise UnsupportedModel(f"layer_types has {len(types)} entries for {n} layers")
    words = _LAYER_WORDS[arch]
    unknown = sorted({t for t in types if t not in words})
    if unknown:
        raise UnsupportedModel(f"unsupported layer_types entry {unknown[0]!r} on {arch}")
    return tuple(words[t] for t in types)


def state_space_layers(
    arch: str, text: Mapping[str, Any]
) -> tuple[tuple[LayerKind, ...], LinearAttention | None]:
    """The attention layers' kinds (all full) and the other layers' state (None: none)."""
    n = int(text["num_hidden_layers"])
    unstated = [name for name in _GRANITE_STATED if name not in text]
    if arch == GRANITE_HYBRID and unstated:
        raise UnsupportedModel(
            f"{arch} config without `{unstated[0]}` (transformers and SGLang default it "
            "differently)"
        )
    recurrent = _recurrent(arch, text, n)
    ids = tuple(i for i, r in enumerate(recurrent) if r)
    kinds = (LayerKind.FULL,) * (n - len(ids))
    if not ids:
        return kinds, None
    if arch == LFM2:
        hidden = _positive(text, "hidden_size")
        conv_dim = text.get("conv_dim", hidden)
        if conv_dim != hidden:
            raise UnsupportedModel(
                f"`conv_dim` {conv_dim!r} differs from hidden_size {hidden}: SGLang sizes the "
                "conv state by hidden_size, vLLM by conv_dim"
            )
        kernel = _positive(text, "conv_L_cache")
        state = LinearAttention(ids, 1, hidden, 0, 1, kernel, kind=StateKind.SHORT_CONV)
        return kinds, state
    heads = _positive(text, "mamba_n_heads")
    head_dim = text["mamba_d_head"]
    inner = _positive(text, "mamba_expand") * _positive(text, "hidden_size")
    if head_dim == "auto":  # transformers GraniteMoeHybridConfig.__post_init__
        head_dim = inner // heads
    if not isinstance(head_dim, int) or head_dim * heads != inner:
        raise UnsupportedModel(
            f"`mamba_d_head` {head_dim!r} x `mamba_n_heads` {heads} is not mamba_expand x "
            f"hidden_size ({inner})"
        )
    groups = _positive(text, "mamba_n_groups")
    d_state = _positive(text, "mamba_d_state")
    kernel = _positive(text, "mamba_d_conv")
    state = LinearAttention(ids, groups, heads, d_state, head_dim, kernel, kind=StateKind.MAMBA2)
    return kinds, state


def state_space_params(
    arch: str, text: Mapping[str, Any], quantized: ModuleFilter
) -> tuple[ParamGroup, ...]:
    """Parameter groups of a Granite-4.0-H or LFM2 decoder."""
    _, state = state_space_layers(arch, text)
    held = state.layer_ids if state else ()
    h, n, n_state = int(text["hidden_size"]), int(text["num_hidden_layers"]), len(held)
    n_attn = n - n_state
    first_attn = next((i for i in range(n) if i not in held), 0)
    first_state = held[0] if held else 0
    g = Groups(quantized)
    g.add(params.EMBEDDING, int(text["vocab_size"]) * h, True, "model.embed_tokens", linear=False)
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    hd = h // heads
    attn = f"model.layers.{first_attn}.self_attn"
    g.add(params.ATTENTION, n_attn * 2 * h * heads * hd, True, f"{attn}.q_proj")
    g.add(params.ATTENTION_KV, n_attn * 2 * h * kv_heads * hd, True, f"{attn}.k_proj")
    norms = n * 2 * h + h
    if arch == LFM2:
        norms += n_attn * 2 * hd  # q_layernorm, k_layernorm
        bias = h if text.get("conv_bias", False) else 0
        per_conv = h * 3 * h + 3 * bias + h * int(text["conv_L_cache"]) + bias + h * h + bias
        g.add(SHORT_CONV, n_state * per_conv, True, f"model.layers.{first_state}.conv.in_proj")
        _lfm2_mlp(g, text, h, n)
    else:
        if state is not None:
            norms += n_state * state.num_value_heads * state.value_head_dim  # gated RMSNorm
            g.add(
                MAMBA_MIXER,
                n_state * _mamba_mixer(text, h, state),
                True,
                f"model.layers.{first_state}.mamba.in_proj",
            )
        _granite_mlp(g, text, h, n)
    g.add(params.NORMS, norms, False, "model.norm", linear=False)
    if not _tied(arch, text):
        g.add(params.LM_HEAD, int(text["vocab_size"]) * h, True, "lm_head")
    return tuple(g.groups)


def _tied(arch: str, text: Mapping[str, Any]) -> bool:
    # LFM2 files state `tie_embedding`, which transformers' Lfm2Config takes for the field
    if arch == LFM2 and "tie_embedding" in text:
        return bool(text["tie_embedding"])
    return bool(text.get("tie_word_embeddings", False))


def _mamba_mixer(text: Mapping[str, Any], h: int, state: LinearAttention) -> int:
    """MambaMixer2's parameters: in_proj to (z, x, B, C, dt), the conv over (x, B, C) with its
    bias (`mamba_conv_bias`), dt_bias, A and D per head, out_proj (bias per `mamba_proj_bias`)."""
    inner = state.num_value_heads * state.value_head_dim
    heads = state.num_value_heads
    in_width = inner + state.conv_dim + heads
    proj_bias = bool(text.get("mamba_proj_bias", False))
    conv_bias = state.conv_dim if text.get("mamba_conv_bias", True) else 0
    return (
        h * in_width
        + (in_width if proj_bias else 0)
        + state.conv_dim * state.conv_kernel
        + conv_bias
        + 3 * heads
        + inner * h
        + (h if proj_bias else 0)
    )


def _granite_mlp(g: Groups, text: Mapping[str, Any], h: int, n: int) -> None:
    """The routed experts (input_linear, output_linear), the router and the shared MLP of
    every layer (GraniteMoeHybridDecoderLayer: `block_sparse_moe` when num_local_experts > 0,
    `shared_mlp` always)."""
    experts = int(text.get("num_local_experts") or 0)
    shared = int(text["shared_intermediate_size"])
    if experts:
        inter = int(text["intermediate_size"])
        top_k = int(text["num_experts_per_tok"])
        per_expert = 3 * h * inter
        g.add(
            params.ROUTED_EXPERTS,
            n * experts * per_expert,
            True,
            "model.layers.0.block_sparse_moe.input_linear",
            active=n * top_k * per_expert,
        )
        g.add(params.ROUTER, n * experts * h, False, "model.layers.0.block_sparse_moe.router.layer")
    shared_mlp = "model.layers.0.shared_mlp.input_linear"
    g.add(
        params.SHARED_EXPERTS if experts else params.DENSE_MLP, n * 3 * h * shared, True, shared_mlp
    )


def mlp_widths(arch: str, text: Mapping[str, Any]) -> tuple[int, int]:
    """The widest dense MLP a layer runs and one routed expert's width: LFM2's adjusted
    feed-forward width; Granite-4.0-H's shared_mlp (every layer) and its experts'
    intermediate_size."""
    if arch == LFM2:
        return lfm2_ff_width(text), 0
    experts = int(text.get("num_local_experts") or 0)
    return int(text["shared_intermediate_size"]), int(text["intermediate_size"]) if experts else 0


def lfm2_ff_width(text: Mapping[str, Any]) -> int:
    """Lfm2MLP's width: with block_auto_adjust_ff_dim, 2/3 of the file's `block_ff_dim`
    (transformers reads it as intermediate_size), times block_ffn_dim_multiplier, rounded up to
    block_multiple_of (vLLM Lfm2MLP, v0.24.0)."""
    width = int(text.get("block_ff_dim") or text["intermediate_size"])
    if text.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier = text.get("block_ffn_dim_multiplier")
        if multiplier is not None:
            width = int(float(multiplier) * width)
        step = int(text.get("block_multiple_of", 256))
        width = step * -(-width // step)
    return width


def _lfm2_mlp(g: Groups, text: Mapping[str, Any], h: int, n: int) -> None:
    """Lfm2MLP: w1 and w3 to the feed-forward width, w2 back."""
    width = lfm2_ff_width(text)
    g.add(params.DENSE_MLP, n * 3 * h * width, True, "model.layers.0.feed_forward.w1")
