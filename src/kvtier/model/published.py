"""A published config.json read as the engines read it: sections, unstated defaults, dtype, types.

- The decoder's fields sit at the top level or under `text_config` / `language_config` /
  `llm_config`; the text section's `model_type` (or its wrapper's) picks the defaults for the
  fields the file leaves unstated (`config_defaults.TEXT_DEFAULTS`).
- A vision tower is read over its architecture's defaults, so keys of its own go unread.
- Every field kvtier reads is type-checked here; a bad one raises UnsupportedModel naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from kvtier.errors import UnsupportedModel
from kvtier.model.config_defaults import TEXT_DEFAULTS, TEXT_MODEL_TYPE, VISION_DEFAULTS
from kvtier.model.dtypes import DTYPE_BYTES

NESTED_TEXT_KEYS = ("text_config", "language_config", "llm_config")

# Integer fields, by the least value they may take; `None` reads as unstated
_POSITIVE = frozenset(
    {
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "intermediate_size_mlp",
        "moe_intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "seq_length",
        "original_max_position_embeddings",
        "num_local_experts",
        "num_experts",
        "n_routed_experts",
        "num_experts_per_tok",
        "experts_per_token",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "sliding_window",
        "sliding_window_pattern",
        "attention_chunk_size",
        "decoder_sparse_step",
        "moe_layer_freq",
        "interleave_moe_layer_step",
        "no_rope_layer_interval",
        "rotary_dim",
        "index_head_dim",
        "index_n_heads",
        "index_topk",
        "index_kpool",
        "cli_factor",
        "global_head_dim",
        "num_global_key_value_heads",
        # vision towers
        "depth",
        "patch_size",
        "temporal_patch_size",
        "spatial_merge_size",
        "out_hidden_size",
        "image_size",
        "num_channels",
        "in_channels",
        "init_pos_emb_height",
        "init_pos_emb_width",
        "projector_input_dim",
        "projector_output_dim",
        "vision_output_dim",
        "position_embedding_size",
    }
)
_NON_NEGATIVE = frozenset(
    {
        "n_shared_experts",
        "first_k_dense_replace",
        "q_lora_rank",
        "num_nextn_predict_layers",
        "num_kv_shared_layers",
        "hidden_size_per_layer_input",
    }
)
_INT_LISTS = frozenset({"no_rope_layers", "mlp_only_layers", "merge_kernel_size"})
_FRACTIONS = frozenset({"partial_rotary_factor", "pixel_shuffle_ratio"})
_MAPPINGS = frozenset({"rope_scaling", "rope_parameters", "quantization_config"})
_FLAGS = frozenset(
    {
        "tie_word_embeddings",
        "attention_bias",
        "use_sliding_window",
        "attention_k_eq_v",
        "enable_moe_block",
        "use_double_wide_mlp",
    }
)

_MISSING_DTYPE = (
    "config.json states no dtype: bfloat16, as both engines run it under --dtype auto on "
    "compute capability >= 8.0 (vLLM `_find_dtype` reads it as float32 and "
    "`_resolve_auto_dtype` downcasts float32 to bfloat16; SGLang `_get_and_verify_dtype` "
    "downcasts it to bfloat16 for Gemma and gpt-oss mxfp4, to float16 elsewhere: 2 bytes alike)"
)
_FLOAT32_DTYPE = (
    "config.json `{field}` float32: bfloat16, as both engines run it under --dtype auto on "
    "compute capability >= 8.0 (vLLM `_resolve_auto_dtype`; SGLang `_get_and_verify_dtype`: "
    "bfloat16 for Gemma, float16 elsewhere: 2 bytes alike)"
)


class TextSection(NamedTuple):
    fields: dict[str, Any]  # the decoder's fields, unstated ones filled from the defaults table
    where: str  # "" or the key it sits under plus a dot, for naming fields in errors
    model_type: str | None
    defaulted: tuple[str, ...]  # "field=value (class)" for every field filled from defaults


def text_section(config: Mapping[str, Any], nested: bool, model_id: str) -> TextSection:
    """The decoder's section of `config`; `nested` wrappers must hold it under a text key."""
    key = next((k for k in NESTED_TEXT_KEYS if config.get(k) is not None), None)
    if key is None:
        if nested:
            raise UnsupportedModel(f"{model_id}: config has no `text_config`")
        section: Mapping[str, Any] = config
    else:
        section = config[key]
        if not isinstance(section, Mapping):
            raise UnsupportedModel(f"{model_id}: `{key}` must be an object")
    where = f"{key}." if key else ""
    top_type = config.get("model_type") or None
    model_type = section.get("model_type") or (
        TEXT_MODEL_TYPE.get(top_type) if key and isinstance(top_type, str) else top_type
    )
    for name, value in (("model_type", top_type), (f"{where}model_type", model_type)):
        known = value is None or (
            isinstance(value, str) and (value in TEXT_DEFAULTS or value in TEXT_MODEL_TYPE)
        )
        if not known:
            raise UnsupportedModel(f"{model_id}: unsupported `{name}` {value!r}")
    fields = dict(section)
    defaulted: list[str] = []
    defaults = TEXT_DEFAULTS.get(model_type) if isinstance(model_type, str) else None
    if defaults is not None:
        for name, value in defaults.fields.items():
            if name not in fields:
                fields[name] = value
                defaulted.append(f"{name}={value} ({defaults.source})")
    return TextSection(checked(fields, where, model_id), where, model_type, tuple(defaulted))


def vision_section(arch: str, vision: Any, model_id: str) -> dict[str, Any]:
    """The vision tower's fields over its architecture's defaults (keys of its own go unread)."""
    if not isinstance(vision, Mapping):
        raise UnsupportedModel(f"{model_id}: `vision_config` must be an object")
    defaults = VISION_DEFAULTS.get(arch)
    if defaults is None:
        raise UnsupportedModel(f"{model_id}: unsupported vision tower of architecture {arch!r}")
    return checked({**defaults.fields, **vision}, "vision_config.", model_id)


def checked(fields: dict[str, Any], where: str, model_id: str) -> dict[str, Any]:
    """`fields` with every field kvtier reads type-checked; `None` integers read as unstated."""
    out = {}
    for name, value in fields.items():
        if value is None and (name in _POSITIVE or name in _NON_NEGATIVE):
            continue
        problem = _problem(name, value)
        if problem:
            raise UnsupportedModel(f"{model_id}: `{where}{name}` must be {problem}, got {value!r}")
        out[name] = value
    return out


# Upper bounds: a layer count is walked layer by layer, so it stays small; any other size fits
# in 32 bits in every published model
_MOST = {"num_hidden_layers": 4096, "depth": 4096, "num_nextn_predict_layers": 64}
_MOST_INT = (1 << 31) - 1


def _problem(name: str, value: Any) -> str | None:
    if name in _POSITIVE or name in _NON_NEGATIVE:
        least = 1 if name in _POSITIVE else 0
        most = _MOST.get(name, _MOST_INT)
        ok = isinstance(value, int) and not isinstance(value, bool) and least <= value <= most
        return None if ok else f"an integer from {least} to {most:,}"
    if name in _INT_LISTS:
        ok = isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MOST_INT for v in value
        )
        return None if ok else "a list of integers >= 0"
    if name == "layer_types":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else "a list of strings"
    if name in _FRACTIONS:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1
        return None if ok else "a number in (0, 1]"
    if name in _MAPPINGS:
        if value is not None and not isinstance(value, Mapping):
            return "an object or null"
        if name == "rope_scaling" and value:
            return _rope_problem(value)
        return None
    if name in _FLAGS:
        return None if value is None or isinstance(value, bool) else "true, false or null"
    return None


def _rope_problem(scaling: Mapping[str, Any]) -> str | None:
    factor = scaling.get("factor")
    if factor is not None and (
        not isinstance(factor, int | float) or isinstance(factor, bool) or factor <= 0
    ):
        return "an object whose `factor` is a number > 0"
    original = scaling.get("original_max_position_embeddings")
    if original is not None and (
        not isinstance(original, int) or isinstance(original, bool) or original < 1
    ):
        return "an object whose `original_max_position_embeddings` is an integer >= 1"
    return None


def model_dtype(config: Mapping[str, Any], text: TextSection, model_id: str) -> tuple[str, str]:
    """The dtype both engines load the weights in under `--dtype auto`, and where it came from.

    transformers v5 writes `dtype`, earlier releases `torch_dtype`; the text section's wins.
    """
    sections = [(text.fields, text.where)] + ([(config, "")] if text.where else [])
    for section, where in sections:
        for key in ("dtype", "torch_dtype"):
            value = section.get(key)
            if value is None:
                continue
            name = value.removeprefix("torch.") if isinstance(value, str) else ""
            width = DTYPE_BYTES.get(name)
            if width is None:
                raise UnsupportedModel(
                    f"{model_id}: `{where}{key}` {value!r} is not a model dtype "
                    f"(known: {', '.join(DTYPE_BYTES)})"
                )
            if width == 4:
                return "bfloat16", _FLOAT32_DTYPE.format(field=f"{where}{key}")
            return name, f"config.json `{where}{key}`"
    return "bfloat16", _MISSING_DTYPE
