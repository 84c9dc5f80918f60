"""ModelSpec from a Hugging Face `config.json`: KV geometry, parameter groups, quantization.

A published file is read as the engines read it (`published.py`: nested text sections, unstated
fields at transformers' defaults, the dtype `--dtype auto` resolves to). Only architectures whose
attention layout is known are accepted (hybrid linear-attention decoders through
`linear_attention.py`, Mamba2 and short-conv hybrids through `state_space.py`, Gemma 4's two
KV shapes and KV-shared layers through `gemma4.py`); anything else
(other mamba hybrids, unknown `layer_types` or `model_type`, new MLA variants) raises
UnsupportedModel naming the field and value, because a wrong KV geometry silently corrupts every
number downstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from kvtier.errors import UnsupportedModel
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind, ModelSpec, ParamGroup
from kvtier.model.gemma4 import (
    GEMMA4_ARCHITECTURES,
    gemma4_geometry,
    gemma4_moe_layout,
    gemma4_params,
    gemma4_rope_cache,
    gemma4_vision_params,
)
from kvtier.model.linear_attention import (
    HYBRID_LINEAR_ARCHITECTURES,
    hybrid_decoder_params,
    linear_state,
)
from kvtier.model.params import VISION_TOWER, decoder_params, load_buffers, moe_layout
from kvtier.model.published import model_dtype, text_section, vision_section
from kvtier.model.quant import kv_cache_quant_algo, parse_quantization
from kvtier.model.state_space import (
    STATE_SPACE_ARCHITECTURES,
    mlp_widths,
    state_space_layers,
    state_space_params,
)
from kvtier.model.vision import vision_params

# Decoder-only architectures understood here
TEXT_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "GptOssForCausalLM",
        "MiniMaxM2ForCausalLM",
        "Phi3ForCausalLM",
        "Qwen3NextForCausalLM",
        "Glm4MoeForCausalLM",
        "GlmMoeDsaForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "Lfm2ForCausalLM",
        "Gemma4ForCausalLM",
    }
)
# Multimodal wrappers -> checkpoint prefix of their text decoder's modules
WRAPPER_ARCHITECTURES = {
    "KimiK25ForConditionalGeneration": "language_model.",
    "Gemma3ForConditionalGeneration": "language_model.",
    "Gemma4ForConditionalGeneration": "language_model.",
    "Llama4ForConditionalGeneration": "language_model.",
    "Qwen2_5_VLForConditionalGeneration": "",
    "Qwen3_5ForConditionalGeneration": "",
    "Qwen3_5MoeForConditionalGeneration": "",
    "Qwen3VLMoeForConditionalGeneration": "",
}
# Wrappers whose older files keep the decoder's fields at the top level
_TEXT_AT_TOP_LEVEL = frozenset({"Qwen2_5_VLForConditionalGeneration"})
_LAYER_TYPES = {
    "full_attention": LayerKind.FULL,
    "sliding_attention": LayerKind.SLIDING,
    "chunked_attention": LayerKind.CHUNKED,
}
# DeepSeek sparse attention: a config of these families that states `index_topk` runs an
# indexer with a key cache per MLA layer (SGLang configs/model_config.py is_deepseek_dsa,
# v0.5.4 - v0.5.23, GLM-5's GlmMoeDsaForCausalLM from v0.5.9; vLLM models/deepseek_v2.py
# `is_v32 = hasattr(config, "index_topk")`, v0.20.0 - v0.21.0, where v0.21.0's
# GlmMoeDsaForCausalLM is DeepseekV2ForCausalLM under another name)
_DSA_ARCHITECTURES = frozenset(
    {"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"}
)
# architectures that are DSA by definition: a config without `index_topk` is malformed
_DSA_ONLY = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")
# indexer layouts both engines size differently from one key per layer: refused, not guessed
_DSA_LAYOUT_FIELDS = {"index_kpool": 1, "cli_factor": 1, "indexer_types": None}
# tying for configs that state neither it nor a `model_type` (the catalog's condensed entries)
_TIED_BY_DEFAULT = (
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    *GEMMA4_ARCHITECTURES,
)


def model_from_config(config: Mapping[str, Any], model_id: str) -> ModelSpec:
    """Build the ModelSpec of `config` (a parsed config.json); `model_id` names it in output."""
    if not isinstance(config, Mapping):
        raise UnsupportedModel(f"{model_id}: config.json is not a JSON object")
    archs = config.get("architectures")
    if not archs:
        raise UnsupportedModel(f"{model_id}: config.json has no `architectures` field")
    if not isinstance(archs, list) or not isinstance(archs[0], str):
        raise UnsupportedModel(f"{model_id}: `architectures` must be a list of names")
    arch = archs[0]
    if arch not in TEXT_ARCHITECTURES and arch not in WRAPPER_ARCHITECTURES:
        raise UnsupportedModel(f"{model_id}: unsupported architectures entry {arch!r}")
    nested = arch in WRAPPER_ARCHITECTURES and arch not in _TEXT_AT_TOP_LEVEL
    try:
        text = text_section(config, nested, model_id)
        fields = {**text.fields, "tie_word_embeddings": _tied(arch, config, text.fields)}
        dtype = model_dtype(config, text, model_id)
        return _build(arch, config, fields, text.defaulted, dtype, model_id)
    except KeyError as exc:
        raise UnsupportedModel(f"{model_id}: config lacks field {exc.args[0]!r}") from None
    # a field of the wrong type or size that no check in published.py covers (quantization,
    # vision sections): refused as malformed, never carried into the ledger
    except (TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as exc:
        raise UnsupportedModel(f"{model_id}: malformed config.json ({exc})") from None
    except UnsupportedModel as exc:
        if str(exc).startswith(model_id):
            raise
        raise UnsupportedModel(f"{model_id}: {exc}") from None


def _tied(arch: str, config: Mapping[str, Any], text: Mapping[str, Any]) -> bool:
    # the text section's own value (stated or its class default), else the wrapper's
    for tie in (text.get("tie_word_embeddings"), config.get("tie_word_embeddings")):
        if tie is not None:
            return bool(tie)
    return arch in _TIED_BY_DEFAULT


def _build(
    arch: str,
    config: Mapping[str, Any],
    text: Mapping[str, Any],
    defaulted: tuple[str, ...],
    dtype: tuple[str, str],
    model_id: str,
) -> ModelSpec:
    kv = kv_geometry(arch, text)
    qcfg = config.get("quantization_config") or text.get("quantization_config")
    quant, quantized = parse_quantization(qcfg, int(text["hidden_size"]))
    prefix = WRAPPER_ARCHITECTURES.get(arch, "")
    if arch in HYBRID_LINEAR_ARCHITECTURES:
        params = hybrid_decoder_params(arch, text, quantized)
    elif arch in STATE_SPACE_ARCHITECTURES:
        params = state_space_params(arch, text, quantized)
    elif arch in GEMMA4_ARCHITECTURES:
        if config.get("audio_config"):
            raise UnsupportedModel("the Gemma 4 audio tower (audio_config) is not counted")
        params = gemma4_params(text, quantized, prefix)
    else:
        params = decoder_params(arch, text, quantized, prefix)
    raw_vision = config.get("vision_config") if arch in WRAPPER_ARCHITECTURES else None
    vision: dict[str, Any] = {}
    if raw_vision:
        vision = vision_section(arch, raw_vision, model_id)
        if arch in GEMMA4_ARCHITECTURES:
            count = gemma4_vision_params(vision, int(text["hidden_size"]))
        else:
            count = vision_params(arch, vision, int(text["hidden_size"]))
        # a quantization_config under the text section covers the language model only
        stored = bool(config.get("quantization_config")) and quantized(
            "vision_tower.encoder.blocks.0.mlp.fc0", True
        )
        params += (ParamGroup(VISION_TOWER, count, count, False, stored),)
    layout = gemma4_moe_layout if arch in GEMMA4_ARCHITECTURES else partial(moe_layout, arch)
    moe, experts, top_k, shared = layout(text)
    dense_width = int(text.get("intermediate_size_mlp") or text.get("intermediate_size") or 0)
    widths = (0 if all(moe) else dense_width, int(text.get("moe_intermediate_size") or dense_width))
    if arch in STATE_SPACE_ARCHITECTURES:
        widths = mlp_widths(arch, text)
    elif arch in GEMMA4_ARCHITECTURES:  # a Gemma 4 MoE layer runs its dense MLP beside the experts
        widths = (dense_width, widths[1])
    context = text.get("max_position_embeddings") or text.get("seq_length")
    if not context:
        raise UnsupportedModel(f"{model_id}: config states no `max_position_embeddings`")
    return ModelSpec(
        model_id=model_id,
        architecture=arch,
        kv=kv,
        num_hidden_layers=int(text["num_hidden_layers"]),
        hidden_size=int(text["hidden_size"]),
        num_attention_heads=int(text["num_attention_heads"]),
        vocab_size=int(text["vocab_size"]),
        context_length=int(context),
        dtype=dtype[0],
        dtype_source=dtype[1],
        quantization=quant,
        params=params,
        num_experts=experts,
        experts_per_token=top_k,
        draft_layers=int(text.get("num_nextn_predict_layers") or 0),
        multimodal=bool(raw_vision),
        vision_layers=_int_or_none(vision.get("num_hidden_layers")),
        vision_hidden_size=_int_or_none(vision.get("hidden_size")),
        load_buffers=gemma4_rope_cache(text)
        if arch in GEMMA4_ARCHITECTURES
        else load_buffers(arch, text),
        defaulted=defaulted,
        intermediate_size=widths[0],
        moe_intermediate_size=widths[1] if experts else 0,
        shared_experts=shared,
        kv_cache_quant_algo=kv_cache_quant_algo(qcfg),
    )


def kv_geometry(arch: str, text: Mapping[str, Any]) -> KVGeometry:
    """KV shape of every decoder layer of `arch` from its text config."""
    n = int(text["num_hidden_layers"])
    state = None
    if arch in HYBRID_LINEAR_ARCHITECTURES:
        if text.get("kv_lora_rank"):
            raise UnsupportedModel("linear-attention layers beside latent (MLA) attention")
        kinds, state = linear_state(text)  # the attention layers are full attention
    elif arch in STATE_SPACE_ARCHITECTURES:
        kinds, state = state_space_layers(arch, text)
    elif arch in GEMMA4_ARCHITECTURES:
        return gemma4_geometry(text)
    else:
        kinds = _layer_kinds(arch, text, n)
    window = text.get("sliding_window") if LayerKind.SLIDING in kinds else None
    chunk = text.get("attention_chunk_size") if LayerKind.CHUNKED in kinds else None
    if LayerKind.SLIDING in kinds and not window:
        raise UnsupportedModel("sliding-window layers without a `sliding_window` size")
    if text.get("kv_lora_rank"):
        latent = int(text["kv_lora_rank"]) + int(text["qk_rope_head_dim"])
        index_head_dim = _index_head_dim(arch, text)
        return KVGeometry(
            kind=AttentionKind.MLA,
            num_kv_heads=1,
            head_dim=latent,
            v_head_dim=0,
            layer_kinds=kinds,
            sliding_window=window,
            attention_chunk_size=chunk,
            kv_lora_rank=int(text["kv_lora_rank"]),
            qk_rope_head_dim=int(text["qk_rope_head_dim"]),
            index_head_dim=index_head_dim,
        )
    heads = int(text["num_attention_heads"])
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    return KVGeometry(
        kind=AttentionKind.MHA,
        num_kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        v_head_dim=head_dim,
        layer_kinds=kinds,
        sliding_window=int(window) if window else None,
        attention_chunk_size=int(chunk) if chunk else None,
        linear=state,
    )


def _index_head_dim(arch: str, text: Mapping[str, Any]) -> int:
    """Width of the DSA indexer's key per token per layer; 0 for a model without an indexer."""
    if text.get("index_topk") is None:
        if arch in _DSA_ONLY:
            raise UnsupportedModel(f"{arch} config without `index_topk`")
        return 0
    if arch not in _DSA_ARCHITECTURES:
        raise UnsupportedModel(f"unsupported DSA indexer (`index_topk`) on {arch}")
    for name, plain in _DSA_LAYOUT_FIELDS.items():
        if text.get(name, plain) != plain:
            raise UnsupportedModel(f"unsupported DSA indexer layout `{name}` {text[name]!r}")
    return int(text["index_head_dim"])


def _layer_kinds(arch: str, text: Mapping[str, Any], n: int) -> tuple[LayerKind, ...]:
    types = text.get("layer_types")
    if types is not None:
        if len(types) != n:
            raise UnsupportedModel(f"layer_types has {len(types)} entries for {n} layers")
        unknown = sorted({t for t in types if t not in _LAYER_TYPES})
        if unknown:
            raise UnsupportedModel(f"unsupported layer_types entry {unknown[0]!r}")
        return tuple(_LAYER_TYPES[t] for t in types)
    if arch == "GptOssForCausalLM":
        raise UnsupportedModel("gpt-oss config without `layer_types`")
    if arch == "Phi3ForCausalLM" and text.get("sliding_window"):
        raise UnsupportedModel("unsupported sliding_window on Phi3ForCausalLM")
    if arch == "Gemma2ForCausalLM":
        # Gemma 2 alternates, starting with a sliding-window layer
        return tuple(LayerKind.SLIDING if i % 2 == 0 else LayerKind.FULL for i in range(n))
    if arch in ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"):
        pattern = int(text.get("sliding_window_pattern", 6))
        return tuple(
            LayerKind.FULL if (i + 1) % pattern == 0 else LayerKind.SLIDING for i in range(n)
        )
    if arch == "Llama4ForConditionalGeneration" and text.get("attention_chunk_size"):
        # RoPE layers attend within chunks; every no-RoPE layer attends globally
        rope = text.get("no_rope_layers")
        if not rope:
            interval = int(text.get("no_rope_layer_interval", 4))
            rope = [int((i + 1) % interval != 0) for i in range(n)]
        return tuple(LayerKind.CHUNKED if r else LayerKind.FULL for r in rope)
    if text.get("use_sliding_window"):
        raise UnsupportedModel("unsupported use_sliding_window true (per-layer windows)")
    if arch in ("MistralForCausalLM", "MixtralForCausalLM") and text.get("sliding_window"):
        return (LayerKind.SLIDING,) * n
    return (LayerKind.FULL,) * n


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
