"""Hybrid linear-attention decoders: Qwen3-Next, Qwen3.5 / 3.6 (Gated DeltaNet, gated attention).

Which layers are linear: the text config's `layer_types` ("linear_attention" / "full_attention")
when the file states it, else every `full_attention_interval`-th layer is full attention
(transformers `Qwen3NextConfig`, SGLang `Qwen3NextConfig.layers_block_type`; interval 4 by
default). Parameter counts follow the Hugging Face modules of `Qwen3NextForCausalLM` and
`Qwen3_5(Moe)ForConditionalGeneration`; the multi-token-prediction layers (`mtp.*`) are left out,
as neither engine loads them without a speculative draft.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.errors import UnsupportedModel
from kvtier.model.description import LayerKind, LinearAttention, ParamGroup
from kvtier.model.params import (
    ATTENTION,
    ATTENTION_KV,
    DENSE_MLP,
    EMBEDDING,
    LM_HEAD,
    NORMS,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
    Groups,
    moe_layout,
)
from kvtier.model.quant import ModuleFilter

LINEAR_ATTENTION = "linear_attention"  # the Gated DeltaNet projections, conv and gates
HYBRID_LINEAR_ARCHITECTURES = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    }
)
_DEFAULT_INTERVAL = 4  # transformers Qwen3NextConfig / Qwen3_5TextConfig full_attention_interval
_SSM_DTYPES = frozenset({"float32", "bfloat16", "float16"})


def layer_is_linear(text: Mapping[str, Any], n: int) -> tuple[bool, ...]:
    """Per decoder layer whether it is a linear-attention layer."""
    types = text.get("layer_types")
    if types is not None:
        if len(types) != n:
            raise UnsupportedModel(f"layer_types has {len(types)} entries for {n} layers")
        unknown = sorted({t for t in types if t not in ("linear_attention", "full_attention")})
        if unknown:
            raise UnsupportedModel(f"unsupported layer_types entry {unknown[0]!r}")
        return tuple(t == "linear_attention" for t in types)
    interval = text.get("full_attention_interval", _DEFAULT_INTERVAL)
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
        raise UnsupportedModel(
            f"`full_attention_interval` must be an integer >= 1, got {interval!r}"
        )
    return tuple((i + 1) % interval != 0 for i in range(n))


def linear_state(text: Mapping[str, Any]) -> tuple[tuple[LayerKind, ...], LinearAttention]:
    """The attention layers' kinds (all full) and the linear layers' state shape."""
    n = int(text["num_hidden_layers"])
    linear = layer_is_linear(text, n)
    ssm = text.get("mamba_ssm_dtype")
    if ssm is not None and ssm not in _SSM_DTYPES:
        raise UnsupportedModel(f"unsupported mamba_ssm_dtype {ssm!r}")
    fields = (
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
    )
    values: list[int] = []
    for name in fields:
        value = text[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UnsupportedModel(f"`{name}` must be an integer >= 1, got {value!r}")
        values.append(value)
    key_heads, value_heads, key_dim, value_dim, kernel = values
    state = LinearAttention(
        tuple(i for i, is_linear in enumerate(linear) if is_linear),
        key_heads,
        value_heads,
        key_dim,
        value_dim,
        kernel,
        ssm_dtype=ssm,
    )
    return (LayerKind.FULL,) * (n - len(state.layer_ids)), state


def hybrid_decoder_params(
    arch: str, text: Mapping[str, Any], quantized: ModuleFilter
) -> tuple[ParamGroup, ...]:
    """Parameter groups of a hybrid linear-attention decoder (MTP layers excluded)."""
    h = int(text["hidden_size"])
    n = int(text["num_hidden_layers"])
    vocab = int(text["vocab_size"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    hd = int(text.get("head_dim") or h // heads)
    _, state = linear_state(text)
    n_linear = len(state.layer_ids)
    n_full = n - n_linear
    first_full = next(i for i in range(n) if i not in set(state.layer_ids)) if n_full else 0
    first_linear = state.layer_ids[0] if n_linear else 0
    layer = "model.language_model.layers" if arch.startswith("Qwen3_5") else "model.layers"
    g = Groups(quantized)
    g.add(EMBEDDING, vocab * h, True, "model.embed_tokens", linear=False)
    # gated attention: q_proj emits the query and its output gate (attn_output_gate, default on)
    gate = 2 if text.get("attn_output_gate", True) else 1
    q_module = f"{layer}.{first_full}.self_attn.q_proj"
    g.add(ATTENTION, n_full * (gate + 1) * h * heads * hd, True, q_module)
    k_module = f"{layer}.{first_full}.self_attn.k_proj"
    g.add(ATTENTION_KV, n_full * 2 * h * kv_heads * hd, True, k_module)
    value = state.num_value_heads * state.value_head_dim
    # in_proj_qkvz (Qwen3.5: in_proj_qkv + in_proj_z), in_proj_ba (in_proj_b + in_proj_a), the
    # depthwise conv1d without bias, dt_bias and A_log per value head, out_proj
    per_linear = (
        h * (state.conv_dim + value)
        + h * 2 * state.num_value_heads
        + state.conv_dim * state.conv_kernel
        + 2 * state.num_value_heads
        + value * h
    )
    out_module = f"{layer}.{first_linear}.linear_attn.out_proj"
    g.add(LINEAR_ATTENTION, n_linear * per_linear, True, out_module)
    norms = n * 2 * h + h + n_full * 2 * hd + n_linear * state.value_head_dim
    dense = _hybrid_moe_params(g, arch, text, layer)
    inter_dense = int(text.get("intermediate_size") or 0)
    g.add(DENSE_MLP, dense * 3 * h * inter_dense, True, f"{layer}.0.mlp.down_proj")
    g.add(NORMS, norms, False, "model.norm", linear=False)
    if not text.get("tie_word_embeddings", False):
        g.add(LM_HEAD, vocab * h, True, "lm_head")
    return tuple(g.groups)


def _hybrid_moe_params(g: Groups, arch: str, text: Mapping[str, Any], layer: str) -> int:
    """The routed experts, shared expert and router of the MoE layers; returns the dense ones."""
    h = int(text["hidden_size"])
    n = int(text["num_hidden_layers"])
    moe, experts, top_k, _ = moe_layout(arch, text)
    if not experts:
        return n
    inter = int(text["moe_intermediate_size"])
    shared = int(text.get("shared_expert_intermediate_size") or 0)
    n_moe = sum(moe)
    per_expert = 3 * h * inter
    g.add(
        ROUTED_EXPERTS,
        n_moe * experts * per_expert,
        True,
        f"{layer}.0.mlp.experts.0.down_proj",
        active=n_moe * top_k * per_expert,
    )
    # one shared expert and its sigmoid gate (a 1-output linear) per MoE layer
    shared_module = f"{layer}.0.mlp.shared_expert.down_proj"
    g.add(SHARED_EXPERTS, n_moe * (3 * h * shared + h), True, shared_module)
    g.add(ROUTER, n_moe * experts * h, False, f"{layer}.0.mlp.gate")
    return n - n_moe
