"""ModelSpec from config.json: KV geometry of every catalog model, quantization, refusals."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.errors import UnsupportedModel
from kvtier.model import catalog, params
from kvtier.model.config import model_from_config
from kvtier.model.description import LayerKind

# id: [kind, layers, kv heads, head_dim, full-attention layers, window or chunk (null: none)];
# a hybrid linear-attention model counts its attention layers only (the others hold recurrent state)
GEOMETRY = json.loads((Path(__file__).parent / "fixtures" / "model_geometry.json").read_text())


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
    assert [name for name, (_, q) in groups.items() if q] == [params.ROUTED_EXPERTS]
    # SGLang's fused q_a/kv_a projection, the router, norms and the MoonViT tower are replicated
    assert [name for name, (s, _) in groups.items() if not s] == [
        params.ATTENTION_LATENT,
        params.ROUTER,
        params.NORMS,
        params.VISION_TOWER,
    ]
    assert spec.multimodal and (spec.num_experts, spec.experts_per_token) == (384, 8)


def test_deepseek_v3_fp8_block_scales_cover_every_linear_but_head_and_router() -> None:
    spec = catalog.resolve_model("deepseek-v3")
    assert spec.quantization is not None
    assert spec.quantization.bytes_per_param == 1 + 4 / (128 * 128)
    quantized = {name for name, (_, q) in _groups("deepseek-v3").items() if q}
    assert quantized == {
        params.ATTENTION_LATENT,
        params.ATTENTION,
        params.DENSE_MLP,
        params.ROUTED_EXPERTS,
        params.SHARED_EXPERTS,
    }
    assert spec.draft_layers == 1


def test_gpt_oss_mxfp4_is_experts_only() -> None:
    spec = catalog.resolve_model("gpt-oss-120b")
    assert spec.quantization is not None
    assert spec.quantization.bytes_per_param == (4 + 8 / 32) / 8
    assert [n for n, (_, q) in _groups("gpt-oss-120b").items() if q] == [params.ROUTED_EXPERTS]


def test_compressed_tensors_fp8_channel_spares_lm_head() -> None:
    groups = _groups("llama-3.3-70b-fp8")
    assert groups[params.LM_HEAD] == (True, False) and groups[params.EMBEDDING] == (True, False)
    assert (
        groups[params.ATTENTION][1]
        and groups[params.ATTENTION_KV][1]
        and groups[params.DENSE_MLP][1]
    )


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
    assert quantized == {params.ATTENTION, params.ATTENTION_KV, params.DENSE_MLP}


def test_modules_to_not_convert_is_honoured() -> None:
    qcfg = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "modules_to_not_convert": ["model.layers.*.self_attn"],
    }
    spec = model_from_config(_config("qwen2.5-7b") | {"quantization_config": qcfg}, "q")
    assert {g.name for g in spec.params if g.quantized} == {params.DENSE_MLP}


def test_tied_embeddings_have_no_lm_head() -> None:
    assert params.LM_HEAD not in _groups("qwen3-0.6b")
    assert params.LM_HEAD in _groups("qwen3-8b")
    assert params.LM_HEAD not in _groups("gemma-3-27b")


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
