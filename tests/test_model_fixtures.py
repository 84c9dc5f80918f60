"""Published config.json files load as they are, for both engines (tests/fixtures/configs/)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main
from kvtier.errors import KvtierError
from kvtier.model.catalog import resolve_model
from kvtier.model.config import model_from_config
from kvtier.model.description import ModelSpec
from kvtier.model.dtypes import dtype_bytes
from kvtier.model.params import VISION_TOWER
from kvtier.model.weights import weight_bytes

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"
FIXTURES = sorted(p.stem for p in CONFIGS.glob("*.json"))

# fixture: (KV bytes per token at TP1 in the model dtype, weight GiB per GPU at TP1)
# KV: layers x kv heads x (K + V head dims) x 2 B, or for MLA layers x (512 + 64) x 2 B
EXPECTED = {
    "llama-3.1-8b": (32 * 8 * 256 * 2, 14.99),  # 131,072; vLLM logs 14.99 GiB (L05)
    "qwen3-8b": (36 * 8 * 256 * 2, 15.27),  # vLLM logs 15.27 GiB (L16)
    "gemma-3-27b-it": (62 * 16 * 256 * 2, 51.38),
    "gpt-oss-20b": (24 * 8 * 128 * 2, 12.82),
    "kimi-k2.5": (61 * 576 * 2, 555.26),  # 70,272 B: the seed scenario's figure
    "deepseek-v3": (61 * 576 * 2, 628.85),
    "qwen2.5-vl-7b-instruct": (28 * 4 * 256 * 2, 15.48),
    "phi-4": (40 * 10 * 256 * 2, 27.31),
    "kimi-k2-instruct": (61 * 576 * 2, 959.46),
    "deepseek-v3.2": (61 * 576 * 2, 629.72),  # the latent; the indexer: ..._fixtures_families
    "minimax-m2.5": (62 * 8 * 256 * 2, 214.25),
    "minimax-m2.5-nvfp4": (62 * 8 * 256 * 2, 125.19),
    "llama-4-maverick": (48 * 8 * 256 * 2, 746.63),
    # 92 layers x 8 kv heads x (128 + 128) x 2 B = 376,832; the vendored file states no
    # quantization_config, so the weights read as bfloat16 (the router in float32)
    "glm-4.7-fp8": (92 * 8 * 256 * 2, 657.29),
    # 61 x (512 + 64) x 2 B; no quantization_config either: 1.03 T parameters in bfloat16
    "kimi-k2-thinking": (61 * 576 * 2, 1912.82),
    # 12 full-attention layers (every 4th of 48) x 2 kv heads x (256 + 256) x 2 B; the 36
    # Gated DeltaNet layers hold per-request state, not per-token KV
    "qwen3-next-80b-a3b-thinking": (12 * 2 * 512 * 2, 148.44),
    # 94 layers x 4 kv heads x (128 + 128) x 2 B = 192,512
    "qwen3-vl-235b-a22b-thinking": (94 * 4 * 256 * 2, 437.87),
    # the MLA latent of 78 layers (the DSA indexer's key: ..._fixtures_families); read as bfloat16
    "glm-5-fp8": (78 * 576 * 2, 1387.8),
    # GLM-4.7-Flash: 47 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B = 54,144
    "glm-4.7-flash": (47 * 576 * 2, 56.21),
}


def _config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _spec(name: str) -> ModelSpec:
    return model_from_config(_config(name), name)


def _kv_bytes_per_token(spec: ModelSpec, tp: int) -> int:
    kv = spec.kv
    return kv.elements_per_token_per_layer(tp) * kv.num_layers * dtype_bytes(spec.dtype)


def test_at_least_twenty_fixtures_each_with_a_source() -> None:
    sources = (CONFIGS / "SOURCES.md").read_text()
    assert len(FIXTURES) >= 20
    for name in FIXTURES:
        assert f"`{name}.json`" in sources, name


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_loads_with_sane_figures(name: str) -> None:
    spec = _spec(name)
    kv = _kv_bytes_per_token(spec, 1)
    weights = weight_bytes(spec, 1)
    assert 10_000 < kv < 1_000_000
    # the bound admits Kimi-K2-Thinking read unquantized (1,913 GiB)
    assert 0.5 < weights.total_gib < 2_000
    # active parameters never exceed the total, and only MoE models leave some idle
    assert (spec.active_params < spec.total_params) == (spec.num_experts > 0)
    if name in EXPECTED:
        assert (kv, round(weights.total_gib, 2)) == EXPECTED[name]


def _tp(spec: ModelSpec) -> int:
    return next(tp for tp in (8, 4, 2, 1) if spec.num_attention_heads % tp == 0)


# a 10M-token context needs 240 GiB of KV for one request: the engine refuses it on one H200
CONTEXT = {"llama-4-scout": 131_072, "kimi-k2-thinking": 131_072}
# 1.03 T parameters in FP8 (959 GiB) leave 8 x H200 no pool under vLLM's 0.9 utilisation; in
# bfloat16 (1,913 GiB) they need 8 x 288 GB
GPU = {
    **dict.fromkeys(("kimi-k2-instruct", "glm-4.7-fp8"), "B200"),
    **dict.fromkeys(("kimi-k2-thinking", "glm-5-fp8"), "MI355X"),
}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("name", FIXTURES)
def test_both_engines_plan_every_fixture(
    name: str, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tp = _tp(_spec(name))
    args = ["plan", "--engine", engine, "--model", str(CONFIGS / f"{name}.json")]
    if name in CONTEXT:
        args += ["--context-length", str(CONTEXT[name])]
    code = main([*args, "--gpu", GPU.get(name, "H200"), "--tp", str(tp), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert out["kv_tokens"] > 0 and out["kv_bytes_per_token"] > 0


# published file -> catalog entry holding the same model with every field written out
SAME_AS_CATALOG = {
    "kimi-k2.5": "kimi-k2.5",
    "gemma-3-27b-it": "gemma-3-27b",
    "gemma-2-9b-it": "gemma-2-9b",
    "gpt-oss-20b": "gpt-oss-20b",
    "gpt-oss-120b": "gpt-oss-120b",
    "llama-3.1-8b": "llama-3.1-8b",
    "llama-3.1-405b": "llama-3.1-405b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "deepseek-r1": "deepseek-r1",
    "mixtral-8x7b": "mixtral-8x7b",
    "mistral-7b-instruct-v0.3": "mistral-7b",
    "qwen2.5-7b-instruct": "qwen2.5-7b",
    "kimi-k2-instruct": "kimi-k2-instruct",
    "llama-4-maverick": "llama-4-maverick",
    "deepseek-v3.2": "deepseek-v3.2",
    "minimax-m2.5": "minimax-m2.5",
    "minimax-m2.7": "minimax-m2.7",
    "minimax-m2.5-nvfp4": "minimax-m2.5-nvfp4",
    "deepseek-v3.1-nvfp4": "deepseek-v3.1-nvfp4",
    "deepseek-v3.2-nvfp4": "deepseek-v3.2-nvfp4",
    # the Instruct entry's field values against the Thinking model's file (same architecture)
    "qwen3-next-80b-a3b-thinking": "qwen3-next-80b-a3b",
    "glm-4.7-flash": "glm-4.7-flash",
}


@pytest.mark.parametrize("name", sorted(SAME_AS_CATALOG))
def test_published_file_reads_as_the_catalog_entry(name: str) -> None:
    # a checkpoint folder (config.json beside hf_quant_config.json) is read as a model directory
    folder = CONFIGS / name
    spec = resolve_model(str(folder)) if folder.is_dir() else _spec(name)
    entry = resolve_model(SAME_AS_CATALOG[name])
    assert (spec.kv, spec.params, spec.load_buffers) == (entry.kv, entry.params, entry.load_buffers)
    assert (spec.dtype, spec.context_length, spec.quantization) == (
        entry.dtype,
        entry.context_length,
        entry.quantization,
    )


def test_gemma3_unstated_fields_come_from_transformers_defaults() -> None:
    spec = _spec("gemma-3-27b-it")
    assert spec.vocab_size == 262_208 and spec.context_length == 131_072
    assert [i for i, k in enumerate(spec.kv.layer_kinds) if k.value == "full"] == list(
        range(5, 62, 6)
    )
    assert "vocab_size=262208 (transformers.Gemma3TextConfig)" in spec.defaulted
    assert not _spec("llama-3.1-8b").defaulted  # a file that states every field


def test_kimi_vision_keys_of_its_own_read_as_the_engines_defaults() -> None:
    config = _config("kimi-k2.5")
    assert "hidden_size" not in config["vision_config"]  # vt_hidden_size, vt_num_hidden_layers
    tower = {g.name: g for g in _spec("kimi-k2.5").params}[VISION_TOWER]
    assert tower.count == {g.name: g for g in resolve_model("kimi-k2.5").params}[VISION_TOWER].count
    config["vision_config"]["vt_hidden_size"] = 4096  # unread by both engines, so by kvtier too
    assert {g.name: g for g in model_from_config(config, "k").params}[VISION_TOWER] == tower


def test_qwen2_5_vl_vision_tower() -> None:
    # 32 blocks x (4h^2 + 4h + 3 h x 3420 + 2 x 3420 + 3h), patch Conv3d, 2x2 merger into 3584
    h, inter, merged = 1280, 3420, 1280 * 4
    blocks = 32 * (4 * h * h + 4 * h + 3 * h * inter + 2 * inter + 3 * h)
    merger = h + merged * merged + merged + merged * 3584 + 3584
    expected = 3 * 2 * 14 * 14 * h + blocks + merger
    spec = _spec("qwen2.5-vl-7b-instruct")
    assert {g.name: g.count for g in spec.params}[VISION_TOWER] == expected
    assert spec.multimodal and 0.6e9 < expected < 0.7e9


def test_dtype_key_of_transformers_v5() -> None:
    spec = _spec("kimi-k2.5")  # states `dtype`, not `torch_dtype`
    assert (spec.dtype, spec.dtype_source) == ("bfloat16", "config.json `text_config.dtype`")


def test_missing_dtype_resolves_as_the_engines_resolve_it() -> None:
    spec = _spec("gpt-oss-20b")  # states no dtype at all
    assert spec.dtype == "bfloat16"
    assert "_resolve_auto_dtype" in spec.dtype_source
    assert "_get_and_verify_dtype" in spec.dtype_source


def test_float32_config_dtype_runs_in_bfloat16() -> None:
    config = _config("llama-3.1-8b") | {"torch_dtype": "float32"}
    spec = model_from_config(config, "fp32")
    assert spec.dtype == "bfloat16" and "float32" in spec.dtype_source
    assert _kv_bytes_per_token(spec, 1) == 131_072


# Wrong types and values are refused with the field's name, never a traceback
BAD_VALUES = ["4096", -1, 0, True, 2.5, [1], {"a": 1}]


@pytest.mark.parametrize("value", BAD_VALUES)
@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("llama-3.1-8b", ("hidden_size",)),
        ("llama-3.1-8b", ("num_key_value_heads",)),
        ("llama-3.1-8b", ("vocab_size",)),
        ("llama-3.1-8b", ("max_position_embeddings",)),
        ("gemma-3-27b-it", ("text_config", "num_hidden_layers")),
        ("gemma-3-27b-it", ("text_config", "sliding_window")),
        ("gemma-3-27b-it", ("vision_config", "patch_size")),
        ("kimi-k2.5", ("text_config", "kv_lora_rank")),
        ("qwen3-30b-a3b", ("num_experts_per_tok",)),
        ("qwen2.5-vl-7b-instruct", ("vision_config", "depth")),
    ],
)
def test_bad_field_values_name_the_field(name: str, path: tuple[str, ...], value: Any) -> None:
    config = copy.deepcopy(_config(name))
    section = config
    for key in path[:-1]:
        section = section[key]
    section[path[-1]] = value
    with pytest.raises(KvtierError, match=f"`{'.'.join(path)}`"):
        model_from_config(config, name)


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda c: c.update(architectures="LlamaForCausalLM"), "`architectures`"),
        (lambda c: c.update(architectures=["MambaForCausalLM"]), "'MambaForCausalLM'"),
        (lambda c: c.update(layer_types="full_attention"), "`layer_types`"),
        (lambda c: c.update(rope_scaling=[1]), "`rope_scaling`"),
        (lambda c: c["rope_scaling"].update(factor="8"), "`rope_scaling` must be an object whose"),
        (lambda c: c.update(tie_word_embeddings="no"), "`tie_word_embeddings`"),
        (lambda c: c.update(torch_dtype=16), "`torch_dtype`"),
        (lambda c: c.update(model_type=["llama"]), "`model_type`"),
    ],
)
def test_bad_structure_names_the_field(edit: Any, named: str) -> None:
    config = copy.deepcopy(_config("llama-3.1-8b"))
    edit(config)
    with pytest.raises(KvtierError, match=named):
        model_from_config(config, "llama")


def test_model_directory_resolves(tmp_path: Path) -> None:
    # `kvtier plan --model DIR` with the published file as DIR/config.json
    (tmp_path / "config.json").write_text((CONFIGS / "gemma-3-27b-it.json").read_text())
    assert resolve_model(str(tmp_path)).kv == _spec("gemma-3-27b-it").kv


@pytest.mark.parametrize(
    ("name", "width"),
    [
        *[("bfloat16", 2), ("bf16", 2), ("torch.float16", 2), ("half", 2), ("FP16", 2)],
        *[("float32", 4), ("fp32", 4), ("float", 4), ("torch.float32", 4)],
    ],
)
def test_dtype_widths(name: str, width: int) -> None:
    assert dtype_bytes(name) == width


@pytest.mark.parametrize("name", ["int3", "float8_e4m3fn", "", "auto"])
def test_unknown_dtype_is_refused(name: str) -> None:
    with pytest.raises(KvtierError, match="unsupported model dtype"):
        dtype_bytes(name)


def test_wrapper_text_section_must_be_an_object() -> None:
    config = _config("gemma-3-27b-it") | {"text_config": "gemma3_text"}
    with pytest.raises(KvtierError, match="`text_config` must be an object"):
        model_from_config(config, "gemma")
