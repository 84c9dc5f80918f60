"""Defaults a published config.json leaves unstated, per `model_type`, as both engines see them.

SGLang and vLLM build their model config with transformers' config class for the `model_type`,
so a field the file omits takes that class's default (google/gemma-3-27b-it states neither
`vocab_size` nor `max_position_embeddings`). Only fields kvtier reads are listed; each entry names
the class it mirrors, and tests/test_model_defaults.py checks every value against transformers.
Fields whose default is derived (num_key_value_heads = num_attention_heads, head_dim = hidden_size
// num_attention_heads) are derived in config.py, as transformers derives them.

Vision towers are keyed by architecture: their configs use keys of their own (Kimi-K2.5's
`vt_hidden_size`, ...) that neither engine reads; both build the tower from the class defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class Defaults(NamedTuple):
    source: str  # the class the values mirror, e.g. "transformers.LlamaConfig"
    fields: Mapping[str, Any]


def _mla(kv_lora: int, q_lora: int, rope: int, nope: int, v: int) -> dict[str, int]:
    """Multi-head latent attention's widths, in the order the DeepSeek-style classes list them."""
    return {
        "kv_lora_rank": kv_lora,
        "q_lora_rank": q_lora,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope,
        "v_head_dim": v,
    }


def _dsa(head_dim: int, heads: int, topk: int) -> dict[str, int]:
    """DeepSeek sparse attention's lightning indexer."""
    return {"index_head_dim": head_dim, "index_n_heads": heads, "index_topk": topk}


_LLAMA = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "attention_bias": False,
}
_MISTRAL = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}
_QWEN = {
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "sliding_window": None,
    "use_sliding_window": False,
}
# fields the Qwen3-Next and Qwen3.5 text classes share (their other defaults differ)
_QWEN3_LINEAR = {
    "vocab_size": 248320,
    "num_attention_heads": 16,
    "head_dim": 256,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
}
_QWEN3_VL_VISION = {
    "depth": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": 3584,
    "num_position_embeddings": 2304,
}
_DEEPSEEK_V3 = {
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    **_mla(512, 1536, 64, 128, 128),
}
# the Gemma 2 2B shape both Gemma classes default to
_GEMMA_2B = {
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
}
_GEMMA3_TEXT = {
    "vocab_size": 262208,
    **_GEMMA_2B,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": True,
    "sliding_window": 4096,
    # every 6th layer global: the class's default `layer_types` (older releases'
    # `sliding_window_pattern`)
    "sliding_window_pattern": 6,
}
_QWEN2_5_VL_TEXT = {
    "vocab_size": 152064,
    "hidden_size": 8192,
    "intermediate_size": 29568,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "max_position_embeddings": 32768,
    "sliding_window": None,
    "use_sliding_window": False,
}

TEXT_DEFAULTS: dict[str, Defaults] = {
    "llama": Defaults("transformers.LlamaConfig", _LLAMA),
    "mistral": Defaults("transformers.MistralConfig", {**_MISTRAL, "sliding_window": 4096}),
    "mixtral": Defaults(
        "transformers.MixtralConfig",
        {**_MISTRAL, "sliding_window": None, "num_local_experts": 8, "num_experts_per_tok": 2},
    ),
    "qwen2": Defaults("transformers.Qwen2Config", _QWEN),
    "qwen3": Defaults(
        "transformers.Qwen3Config", {**_QWEN, "head_dim": 128, "attention_bias": False}
    ),
    "qwen3_moe": Defaults(
        "transformers.Qwen3MoeConfig",
        {
            **_QWEN,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 24,
            "num_key_value_heads": 4,
            "attention_bias": False,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 768,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        },
    ),
    "qwen2_5_vl_text": Defaults("transformers.Qwen2_5_VLTextConfig", _QWEN2_5_VL_TEXT),
    "qwen3_next": Defaults(
        "transformers.Qwen3NextConfig",
        {
            **_QWEN3_LINEAR,
            "vocab_size": 151936,
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 48,
            "num_key_value_heads": 2,
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        },
    ),
    "qwen3_5_text": Defaults(
        "transformers.Qwen3_5TextConfig",
        {
            **_QWEN3_LINEAR,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 32,
            "num_key_value_heads": 4,
        },
    ),
    "qwen3_5_moe_text": Defaults(
        "transformers.Qwen3_5MoeTextConfig",
        {
            **_QWEN3_LINEAR,
            "hidden_size": 2048,
            "num_hidden_layers": 40,
            "num_key_value_heads": 2,
            "num_experts": 256,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
        },
    ),
    "qwen3_vl_moe_text": Defaults(
        "transformers.Qwen3VLMoeTextConfig",
        {
            "vocab_size": 151936,
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "head_dim": 128,
            "max_position_embeddings": 128000,
            "tie_word_embeddings": True,
            "attention_bias": False,
            "num_experts": 60,
            "num_experts_per_tok": 4,
            "moe_intermediate_size": 1408,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        },
    ),
    "glm4_moe": Defaults(
        "transformers.Glm4MoeConfig",
        {
            "vocab_size": 151552,
            "hidden_size": 4096,
            "intermediate_size": 10944,
            "num_hidden_layers": 46,
            "num_attention_heads": 96,
            "num_key_value_heads": 8,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "use_qk_norm": False,
            "n_routed_experts": 128,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 1408,
            "first_k_dense_replace": 1,
            "num_nextn_predict_layers": 1,
        },
    ),
    # older Qwen2.5-VL files keep the text fields at the top level, read with the same defaults
    "qwen2_5_vl": Defaults("transformers.Qwen2_5_VLTextConfig", _QWEN2_5_VL_TEXT),
    "deepseek_v2": Defaults(
        "transformers.DeepseekV2Config",
        {
            "vocab_size": 102400,
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "moe_intermediate_size": 1407,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "max_position_embeddings": 2048,
            "tie_word_embeddings": False,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "first_k_dense_replace": 0,
            **_mla(512, 1536, 64, 128, 128),
        },
    ),
    "deepseek_v3": Defaults("transformers.DeepseekV3Config", _DEEPSEEK_V3),
    "deepseek_v32": Defaults(
        "transformers.DeepseekV32Config",
        {
            **_DEEPSEEK_V3,
            "max_position_embeddings": 163840,
            **_dsa(128, 64, 2048),
        },
    ),
    # the class keeps first_k_dense_replace as a per-layer list (mlp_layer_types): a file must
    # state it
    "glm4_moe_lite": Defaults(
        "transformers.Glm4MoeLiteConfig",
        {
            "vocab_size": 154880,
            "hidden_size": 2048,
            "intermediate_size": 10240,
            "moe_intermediate_size": 1536,
            "num_hidden_layers": 47,
            "num_attention_heads": 20,
            "num_key_value_heads": 20,
            "max_position_embeddings": 202752,
            "tie_word_embeddings": False,
            "n_routed_experts": 64,
            "n_shared_experts": 1,
            "num_experts_per_tok": 4,
            **_mla(512, 768, 64, 192, 256),
        },
    ),
    "glm_moe_dsa": Defaults(
        "transformers.GlmMoeDsaConfig",
        {
            "vocab_size": 154880,
            "hidden_size": 6144,
            "intermediate_size": 12288,
            "moe_intermediate_size": 2048,
            "num_hidden_layers": 78,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "max_position_embeddings": 202752,
            "tie_word_embeddings": False,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
            "first_k_dense_replace": 3,
            **_mla(512, 2048, 64, 192, 256),
            **_dsa(128, 32, 2048),
        },
    ),
    # Kimi K2/K2.5 text configs: vLLM's KimiK25Config builds them as DeepseekV3Config
    "kimi_k2": Defaults("transformers.DeepseekV3Config", _DEEPSEEK_V3),
    "gemma2": Defaults(
        "transformers.Gemma2Config",
        {
            "vocab_size": 256000,
            **_GEMMA_2B,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": True,
            "sliding_window": 4096,
        },
    ),
    "gemma3_text": Defaults("transformers.Gemma3TextConfig", _GEMMA3_TEXT),
    # global_head_dim and num_global_key_value_heads stay unstated: `model.gemma4` refuses or
    # reads them itself
    "gemma4_text": Defaults(
        "transformers.Gemma4TextConfig",
        {
            "vocab_size": 262144,
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "num_hidden_layers": 30,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": True,
            "attention_bias": False,
            "sliding_window": 512,
            "hidden_size_per_layer_input": 256,
            "attention_k_eq_v": False,
            "num_kv_shared_layers": 0,
            "enable_moe_block": False,
            "use_double_wide_mlp": False,
        },
    ),
    "gpt_oss": Defaults(
        "transformers.GptOssConfig",
        {
            "vocab_size": 201088,
            "hidden_size": 2880,
            "intermediate_size": 2880,
            "num_hidden_layers": 36,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
            "sliding_window": 128,
            "attention_bias": True,
            "num_local_experts": 128,
            "num_experts_per_tok": 4,
        },
    ),
    "minimax_m2": Defaults(
        "transformers.MiniMaxM2Config",
        {
            "vocab_size": 200064,
            "hidden_size": 3072,
            "intermediate_size": 1536,
            "num_hidden_layers": 62,
            "num_attention_heads": 48,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 196608,
            "tie_word_embeddings": False,
            "num_local_experts": 256,
            "num_experts_per_tok": 8,
        },
    ),
    "phi3": Defaults(
        "transformers.Phi3Config",
        {
            "vocab_size": 32064,
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "max_position_embeddings": 4096,
            "tie_word_embeddings": False,
            "sliding_window": None,
        },
    ),
    # only the fields SGLang's own GraniteMoeHybridConfig (configs/granitemoehybrid.py) defaults
    # alike; the others must be stated (model/state_space.py)
    "granitemoehybrid": Defaults(
        "transformers.GraniteMoeHybridConfig",
        {
            "num_attention_heads": 32,
            "attention_bias": False,
            "mamba_n_groups": 1,
            "mamba_d_conv": 4,
            "mamba_expand": 2,
            "mamba_conv_bias": True,
            "mamba_proj_bias": False,
        },
    ),
    # SGLang's Lfm2Config extends this class (configs/lfm2.py)
    "lfm2": Defaults(
        "transformers.Lfm2Config",
        {
            "vocab_size": 65536,
            "hidden_size": 2560,
            "intermediate_size": 12288,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 128000,
            "tie_word_embeddings": True,
            "conv_bias": False,
            "conv_L_cache": 3,
            "block_multiple_of": 256,
            "block_ffn_dim_multiplier": 1.0,
            "block_auto_adjust_ff_dim": True,
        },
    ),
    "llama4_text": Defaults(
        "transformers.Llama4TextConfig",
        {
            "vocab_size": 202048,
            "hidden_size": 5120,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "num_hidden_layers": 48,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "num_local_experts": 16,
            "num_experts_per_tok": 1,
            "attention_chunk_size": 8192,
            "no_rope_layer_interval": 4,
            "interleave_moe_layer_step": 1,
        },
    ),
}

# Wrapper model_type -> the model_type of its text section when that section states none
TEXT_MODEL_TYPE = {
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
    "llama4": "llama4_text",
    "kimi_k25": "kimi_k2",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
}

VISION_DEFAULTS: dict[str, Defaults] = {
    # both engines build MoonViT from this class; the published file's vt_* keys go unread
    "KimiK25ForConditionalGeneration": Defaults(
        "vllm.transformers_utils.configs.kimi_k25.KimiK25VisionConfig",
        {
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "patch_size": 14,
            "init_pos_emb_height": 64,
            "init_pos_emb_width": 64,
            "merge_kernel_size": [2, 2],
        },
    ),
    "Gemma3ForConditionalGeneration": Defaults(
        "transformers.SiglipVisionConfig",
        {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_channels": 3,
            "image_size": 224,
            "patch_size": 16,
        },
    ),
    "Gemma4ForConditionalGeneration": Defaults(
        "transformers.Gemma4VisionConfig",
        {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 16,
            "num_attention_heads": 12,
            "num_key_value_heads": 12,
            "head_dim": 64,
            "patch_size": 16,
            "position_embedding_size": 10240,
            "standardize": False,
        },
    ),
    "Llama4ForConditionalGeneration": Defaults(
        "transformers.Llama4VisionConfig",
        {
            "hidden_size": 768,
            "intermediate_size": 5632,
            "num_hidden_layers": 34,
            "num_channels": 3,
            "image_size": 448,
            "patch_size": 14,
            "pixel_shuffle_ratio": 0.5,
            "projector_input_dim": 4096,
            "projector_output_dim": 4096,
            "vision_output_dim": 7680,
        },
    ),
    "Qwen3_5ForConditionalGeneration": Defaults(
        "transformers.Qwen3_5VisionConfig", _QWEN3_VL_VISION
    ),
    "Qwen3_5MoeForConditionalGeneration": Defaults(
        "transformers.Qwen3_5MoeVisionConfig", _QWEN3_VL_VISION
    ),
    "Qwen3VLMoeForConditionalGeneration": Defaults(
        "transformers.Qwen3VLMoeVisionConfig",
        {**_QWEN3_VL_VISION, "deepstack_visual_indexes": (8, 16, 24)},
    ),
    "Qwen2_5_VLForConditionalGeneration": Defaults(
        "transformers.Qwen2_5_VLVisionConfig",
        {
            "depth": 32,
            "hidden_size": 3584,
            "intermediate_size": 3420,
            "in_channels": 3,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "out_hidden_size": 3584,
        },
    ),
}
