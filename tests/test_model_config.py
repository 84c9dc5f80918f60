"""ModelSpec from config.json: KV geometry of every catalog model, quantization, refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvtier.errors import UnsupportedModel
from kvtier.model import catalog
from kvtier.model.config import model_from_config
from kvtier.model.description import LayerKind
from kvtier.model.params import (
    ATTENTION,
    ATTENTION_KV,
    ATTENTION_LATENT,
    DENSE_MLP,
    EMBEDDING,
    LM_HEAD,
    NORMS,
    ROUTED_EXPERTS,
    ROUTER,
    SHARED_EXPERTS,
    VISION_TOWER,
)

# id: (kind, layers, kv heads, head_dim, full-attention layers, window or chunk)
GEOMETRY = {
    "moonshotai/Kimi-K2.5": ("mla", 61, 1, 576, 61, None),
    "deepseek-ai/DeepSeek-V3": ("mla", 61, 1, 576, 61, None),
    "deepseek-ai/DeepSeek-R1": ("mla", 61, 1, 576, 61, None),
    "deepseek-ai/DeepSeek-V2-Lite-Chat": ("mla", 27, 1, 576, 27, None),
    "meta-llama/Llama-3.1-8B-Instruct": ("mha", 32, 8, 128, 32, None),
    "meta-llama/Llama-3.1-70B-Instruct": ("mha", 80, 8, 128, 80, None),
    "meta-llama/Llama-3.1-405B-Instruct": ("mha", 126, 8, 128, 126, None),
    "meta-llama/Llama-3.3-70B-Instruct": ("mha", 80, 8, 128, 80, None),
    "RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic": ("mha", 80, 8, 128, 80, None),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": ("mha", 48, 8, 128, 12, 8192),
    "Qwen/Qwen3-0.6B": ("mha", 28, 8, 128, 28, None),
    "Qwen/Qwen3-8B": ("mha", 36, 8, 128, 36, None),
    "Qwen/Qwen3-14B": ("mha", 40, 8, 128, 40, None),
    "Qwen/Qwen3-32B": ("mha", 64, 8, 128, 64, None),
    "Qwen/Qwen3-30B-A3B": ("mha", 48, 4, 128, 48, None),
    "Qwen/Qwen3-235B-A22B": ("mha", 94, 4, 128, 94, None),
    "Qwen/Qwen2.5-7B-Instruct": ("mha", 28, 4, 128, 28, None),
    "Qwen/Qwen2.5-14B-Instruct": ("mha", 48, 8, 128, 48, None),
    "Qwen/Qwen2.5-32B-Instruct": ("mha", 64, 8, 128, 64, None),
    "Qwen/Qwen2.5-72B-Instruct": ("mha", 80, 8, 128, 80, None),
    "Qwen/QwQ-32B": ("mha", 64, 8, 128, 64, None),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": ("mha", 28, 4, 128, 28, None),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mha", 32, 8, 128, 32, None),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": ("mha", 32, 8, 128, 32, None),
    "google/gemma-2-9b-it": ("mha", 42, 8, 256, 21, 4096),
    "google/gemma-3-27b-it": ("mha", 62, 16, 128, 10, 1024),
    "openai/gpt-oss-20b": ("mha", 24, 8, 64, 12, 128),
    "openai/gpt-oss-120b": ("mha", 36, 8, 64, 18, 128),
    # hybrid linear attention: the attention layers only (the others hold recurrent state)
    "Qwen/Qwen3-Next-80B-A3B-Instruct": ("mha", 12, 2, 256, 12, None),
    "Qwen/Qwen3.5-27B": ("mha", 16, 4, 256, 16, None),
    "Qwen/Qwen3.5-35B-A3B": ("mha", 10, 2, 256, 10, None),
    "Qwen/Qwen3.5-397B-A17B": ("mha", 15, 2, 256, 15, None),
    "moonshotai/Kimi-K2-Instruct": ("mla", 61, 1, 576, 61, None),
    "deepseek-ai/DeepSeek-V3.2": ("mla", 61, 1, 576, 61, None),
    "nvidia/DeepSeek-V3.1-NVFP4": ("mla", 61, 1, 576, 61, None),
    "nvidia/DeepSeek-V3.2-NVFP4": ("mla", 61, 1, 576, 61, None),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": ("mha", 48, 8, 128, 12, 8192),
    "MiniMaxAI/MiniMax-M2.5": ("mha", 62, 8, 128, 62, None),
    "MiniMaxAI/MiniMax-M2.7": ("mha", 62, 8, 128, 62, None),
    "nvidia/MiniMax-M2.5-NVFP4": ("mha", 62, 8, 128, 62, None),
    "zai-org/GLM-4.7": ("mha", 92, 8, 128, 92, None),
    "zai-org/GLM-4.7-Flash": ("mla", 47, 1, 576, 47, None),
    "zai-org/GLM-5": ("mla", 78, 1, 576, 78, None),
    "Qwen/Qwen3-VL-235B-A22B-Instruct": ("mha", 94, 4, 128, 94, None),
}


def _config(model_id: str) -> dict[str, Any]:
    entry = catalog.catalog_entry(model_id)
    assert entry is not None
    return copy.deepcopy(entry.config)


def test_geometry_table_covers_the_catalog() -> None:
    assert sorted(GEOMETRY) == catalog.catalog_ids()


@pytest.mark.parametrize("model_id", sorted(GEOMETRY))
def test_kv_geometry(model_id: str) -> None:
    kind, layers, kv_heads, head_dim, full, local = GEOMETRY[model_id]
    kv = catalog.resolve_model(model_id).kv
    assert (kv.kind.value, kv.num_layers, kv.num_kv_heads, kv.head_dim, kv.num_full_layers) == (
        kind,
        layers,
        kv_heads,
        head_dim,
        full,
    )
    assert (kv.sliding_window or kv.attention_chunk_size) == local
    if kind == "mla":
        assert (kv.kv_lora_rank, kv.qk_rope_head_dim, kv.v_head_dim) == (512, 64, 0)
    else:
        assert kv.v_head_dim == head_dim


def test_kimi_k25_kv_bytes_per_token() -> None:
    # SCENARIO: (512 + 64) x 61 layers x 2 B = 70,272 B per token per GPU, whatever the TP size
    kv = catalog.resolve_model("kimi-k2.5").kv
    for tp in (1, 8):
        assert kv.elements_per_token_per_layer(tp) * kv.num_layers * 2 == 70_272


def test_llama_gqa_elements_per_rank() -> None:
    kv = catalog.resolve_model("llama-3.1-8b").kv
    assert kv.elements_per_token_per_layer(1) == 8 * 256
    assert kv.elements_per_token_per_layer(2) == 4 * 256
    assert kv.elements_per_token_per_layer(16) == 256  # heads replicated past tp = 8


def test_interleaved_layer_patterns() -> None:
    gemma2 = catalog.resolve_model("gemma-2-9b").kv.layer_kinds
    assert gemma2[:3] == (LayerKind.SLIDING, LayerKind.FULL, LayerKind.SLIDING)
    gemma3 = catalog.resolve_model("gemma-3-27b").kv.layer_kinds
    assert [i for i, k in enumerate(gemma3) if k is LayerKind.FULL] == list(range(5, 62, 6))
    scout = catalog.resolve_model("llama-4-scout").kv.layer_kinds
    assert [i for i, k in enumerate(scout) if k is LayerKind.FULL] == list(range(3, 48, 4))
    assert set(scout) == {LayerKind.FULL, LayerKind.CHUNKED}
    oss = catalog.resolve_model("gpt-oss-20b").kv.layer_kinds
    assert oss[:2] == (LayerKind.SLIDING, LayerKind.FULL)


def test_llama4_explicit_no_rope_layers_win_over_interval() -> None:
    config = _config("llama-4-scout")
    config["text_config"]["no_rope_layers"] = [0] * 48
    kv = model_from_config(config, "scout-all-global").kv
    assert kv.num_full_layers == 48 and kv.attention_chunk_size is None


def _groups(model_id: str) -> dict[str, tuple[bool, bool]]:
    spec = catalog.resolve_model(model_id)
    return {g.name: (g.sharded, g.quantized) for g in spec.params}


def test_kimi_k25_only_routed_experts_are_int4() -> None:
    spec = catalog.resolve_model("kimi-k2.5")
    assert spec.quantization is not None
    assert (spec.quantization.method, spec.quantization.bytes_per_param) == ("int4", 0.5625)
    groups = _groups("kimi-k2.5")
    assert [name for name, (_, q) in groups.items() if q] == [ROUTED_EXPERTS]
    # SGLang's fused q_a/kv_a projection, the router, norms and the MoonViT tower are replicated
    assert [name for name, (s, _) in groups.items() if not s] == [
        ATTENTION_LATENT,
        ROUTER,
        NORMS,
        VISION_TOWER,
    ]
    assert spec.multimodal and (spec.num_experts, spec.experts_per_token) == (384, 8)


def test_deepseek_v3_fp8_block_scales_cover_every_linear_but_head_and_router() -> None:
    spec = catalog.resolve_model("deepseek-v3")
    assert spec.quantization is not None
    assert spec.quantization.bytes_per_param == 1 + 4 / (128 * 128)
    quantized = {name for name, (_, q) in _groups("deepseek-v3").items() if q}
    assert quantized == {ATTENTION_LATENT, ATTENTION, DENSE_MLP, ROUTED_EXPERTS, SHARED_EXPERTS}
    assert spec.draft_layers == 1


def test_gpt_oss_mxfp4_is_experts_only() -> None:
    spec = catalog.resolve_model("gpt-oss-120b")
    assert spec.quantization is not None
    assert spec.quantization.bytes_per_param == (4 + 8 / 32) / 8
    assert [n for n, (_, q) in _groups("gpt-oss-120b").items() if q] == [ROUTED_EXPERTS]


def test_compressed_tensors_fp8_channel_spares_lm_head() -> None:
    groups = _groups("llama-3.3-70b-fp8")
    assert groups[LM_HEAD] == (True, False) and groups[EMBEDDING] == (True, False)
    assert groups[ATTENTION][1] and groups[ATTENTION_KV][1] and groups[DENSE_MLP][1]


@pytest.mark.parametrize(
    ("qcfg", "method", "bytes_per_param"),
    [
        (
            {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
            "awq",
            (4 + 20 / 128) / 8,
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False},
            "gptq",
            (4 + 20 / 128) / 8,
        ),
        (
            {
                "quant_method": "modelopt",
                "quantization": {
                    "quant_algo": "NVFP4",
                    "group_size": 16,
                    "exclude_modules": ["lm_head"],
                },
            },
            "nvfp4",
            (4 + 8 / 16) / 8,
        ),
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8", 1.0),
        (
            {
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
                "config_groups": {
                    "group_0": {
                        "targets": ["Linear"],
                        "weights": {
                            "num_bits": 4,
                            "type": "float",
                            "strategy": "tensor_group",
                            "group_size": 16,
                        },
                    }
                },
                "ignore": ["lm_head"],
            },
            "nvfp4",
            (4 + 8 / 16) / 8,
        ),
    ],
)
def test_quantization_formats(qcfg: dict[str, Any], method: str, bytes_per_param: float) -> None:
    config = _config("qwen2.5-7b") | {"quantization_config": qcfg}
    spec = model_from_config(config, "q")
    assert spec.quantization is not None
    assert (spec.quantization.method, spec.quantization.bytes_per_param) == (
        method,
        pytest.approx(bytes_per_param),
    )
    quantized = {g.name for g in spec.params if g.quantized}
    assert quantized == {ATTENTION, ATTENTION_KV, DENSE_MLP}


def test_modules_to_not_convert_is_honoured() -> None:
    qcfg = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "modules_to_not_convert": ["model.layers.*.self_attn"],
    }
    spec = model_from_config(_config("qwen2.5-7b") | {"quantization_config": qcfg}, "q")
    assert {g.name for g in spec.params if g.quantized} == {DENSE_MLP}


def test_tied_embeddings_have_no_lm_head() -> None:
    assert LM_HEAD not in _groups("qwen3-0.6b")
    assert LM_HEAD in _groups("qwen3-8b")
    assert LM_HEAD not in _groups("gemma-3-27b")


@pytest.mark.parametrize(
    ("model_id", "edit", "named"),
    [
        (
            "qwen3-8b",
            lambda c: c.update(architectures=["NemotronHForCausalLM"]),
            "'NemotronHForCausalLM'",
        ),
        (
            "gpt-oss-20b",
            lambda c: c["layer_types"].__setitem__(3, "linear_attention"),
            "layer_types entry 'linear_attention'",
        ),
        ("qwen2.5-7b", lambda c: c.update(use_sliding_window=True), "use_sliding_window"),
        ("qwen3-8b", lambda c: c.pop("architectures"), "architectures"),
        ("qwen3-8b", lambda c: c.pop("hidden_size"), "'hidden_size'"),
        ("qwen3-8b", lambda c: c.update(torch_dtype="int3"), "`torch_dtype` 'int3'"),
        ("qwen3-8b", lambda c: c.update(model_type="qwen9"), "`model_type` 'qwen9'"),
        (
            "gemma-3-27b",
            lambda c: c["text_config"].update(model_type="gemma9_text"),
            "`text_config.model_type` 'gemma9_text'",
        ),
        ("qwen3-8b", lambda c: c.update(hidden_size="4096"), "`hidden_size` must be an integer"),
        (
            "qwen3-8b",
            lambda c: c.update(quantization_config={"quant_method": "bitsandbytes"}),
            "quant_method 'bitsandbytes'",
        ),
        (
            "kimi-k2.5",
            lambda c: c["text_config"]["quantization_config"]["config_groups"].update(
                group_1={"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}
            ),
            "config_groups",
        ),
        ("gpt-oss-20b", lambda c: c.pop("layer_types"), "layer_types"),
    ],
)
def test_refuses_what_it_does_not_understand(model_id: str, edit: Any, named: str) -> None:
    config = _config(model_id)
    edit(config)
    with pytest.raises(UnsupportedModel, match=named.replace("(", r"\(")):
        model_from_config(config, model_id)


def test_unsupported_is_a_user_error() -> None:
    from kvtier.errors import KvtierError

    assert issubclass(UnsupportedModel, KvtierError)  # the CLI prints it as one line, exit 2
