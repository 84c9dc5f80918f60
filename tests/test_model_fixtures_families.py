"""Today's model families from their published config.json files (tests/fixtures/configs/): the
bytes one token's KV takes on each engine, worked out by hand from the config in each test, the
parameters the new layer types add, and the checkpoint formats read from the config.

Engine rules these figures mirror (see kvtier.engines.sglang.pool / kvtier.engines.vllm.pool):
- MLA: one latent of kv_lora_rank + qk_rope_head_dim per token per layer, not split by TP.
- DSA (DeepSeek-V3.2): each MLA layer's indexer also caches an fp8 key of index_head_dim bytes
  plus one fp32 scale per 128 of them: index_head_dim + index_head_dim // 128 x 4 bytes.
- GQA: per-rank KV heads x (head_dim + head_dim) per layer.
- Mamba2 / short-conv hybrids (Granite-4.0-H, LFM2): KV for the attention layers of the
  config's layer list only; each other layer keeps a per-request state of
  conv_dim / tp x (kernel - 1) conv elements plus (Mamba2) heads / tp x head_dim x d_state.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Engine
from kvtier.engines.kvdtype import resolve_kv_dtype
from kvtier.engines.sglang import builder as sglang_builder
from kvtier.engines.sglang import hicache
from kvtier.engines.sglang import mamba as sglang_mamba
from kvtier.engines.sglang import pool as sglang_pool
from kvtier.engines.vllm import mamba as vllm_mamba
from kvtier.engines.vllm import pool as vllm_pool
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log
from kvtier.model.catalog import resolve_model
from kvtier.model.config import model_from_config
from kvtier.model.description import ModelSpec
from kvtier.model.gpu import resolve_gpu
from kvtier.model.params import (
    ATTENTION,
    ATTENTION_KV,
    INDEXER,
    INDEXER_KEYS,
    ROPE_CACHE,
    ROUTED_EXPERTS,
    ROUTER_FP32,
)
from kvtier.model.weights import weight_bytes

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"


def _config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _spec(name: str) -> ModelSpec:
    return model_from_config(_config(name), name)


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["plan", *argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out: dict[str, Any] = json.loads(captured.out)
    return out


def _inputs(out: dict[str, Any]) -> dict[str, str]:
    return {i["name"]: i["value"] for i in out["inputs"]}


# DeepSeek-V3.2: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64, index_head_dim 128
V32_LAYERS, V32_LATENT, V32_INDEX = 61, 512 + 64, 128 + 128 // 128 * 4
assert V32_INDEX == 132


@pytest.mark.parametrize(
    ("engine", "gpu", "extra", "per_token"),
    [
        # bf16 latent (auto below compute capability 10.0) + the indexer's key
        ("sglang", "H200", (), V32_LAYERS * (V32_LATENT * 2 + V32_INDEX)),  # 78,324
        # an fp8 latent: one byte an element, the indexer's key unchanged
        ("sglang", "H200", ("--kv-cache-dtype", "fp8_e4m3"), V32_LAYERS * (V32_LATENT + V32_INDEX)),
        ("vllm", "H200", (), V32_LAYERS * (V32_LATENT * 2 + V32_INDEX)),  # 78,324
        # fp8_ds_mla: 512 fp8 + 4 fp32 scales + 64 bf16 rope = 656 B, the indexer beside it
        ("vllm", "H200", ("--kv-cache-dtype", "fp8_ds_mla"), V32_LAYERS * (656 + V32_INDEX)),
        # FLASHMLA_SPARSE turns any fp8 cache of a DSA model into fp8_ds_mla
        ("vllm", "H200", ("--kv-cache-dtype", "fp8"), V32_LAYERS * (656 + V32_INDEX)),
    ],
)
def test_deepseek_v32_kv_bytes_per_token_carry_the_indexer(
    engine: str,
    gpu: str,
    extra: tuple[str, ...],
    per_token: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = str(CONFIGS / "deepseek-v3.2.json")
    out = _plan(capsys, "--engine", engine, "--model", model, "--gpu", gpu, "--tp", "8", *extra)
    assert out["kv_bytes_per_token"] == per_token


def test_sglang_runs_a_dsa_model_with_pages_of_64(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(CONFIGS / "deepseek-v3.2.json")
    out = _plan(capsys, "--engine", "sglang", "--model", model, "--gpu", "H200", "--tp", "8")
    assert out["kv_tokens"] % 64 == 0
    assert _inputs(out)["page size"] == "64"
    assert _inputs(out)["kv cache dtype"] == "bfloat16"  # compute capability 9.0


def test_sglang_dsa_auto_kv_is_fp8_on_a_compute_capability_10_card(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    card = dataclasses.replace(resolve_gpu("B200"), compute_capability=(10, 0))
    monkeypatch.setattr(sglang_builder, "resolve_gpu", lambda name: card)
    model = str(CONFIGS / "deepseek-v3.2.json")
    out = _plan(capsys, "--engine", "sglang", "--model", model, "--gpu", "B200", "--tp", "8")
    assert _inputs(out)["kv cache dtype"] == "fp8_e4m3"
    # the budget divides by the raw fp8 latent and the indexer: 61 x (576 + 132) = 43,188 B
    assert out["kv_bytes_per_token"] == V32_LAYERS * (V32_LATENT * 1 + V32_INDEX)


@pytest.mark.parametrize(
    ("capability", "dtype"),
    [((9, 0), "bfloat16"), ((10, 0), "fp8_e4m3"), ((12, 0), "fp8_e4m3"), (None, "bfloat16")],
)
def test_sglang_dsa_auto_kv_dtype_by_compute_capability(
    capability: tuple[int, int] | None, dtype: str
) -> None:
    assert sglang_pool.dsa_kv_dtype(capability).name == dtype


def test_sglang_dsa_cell_in_fp8() -> None:
    kv = _spec("deepseek-v3.2").kv
    fp8 = sglang_pool.dsa_kv_dtype((10, 0))
    assert sglang_pool.cell_size(kv, 8, 61, fp8) == V32_LAYERS * (V32_LATENT * 1 + V32_INDEX)


def test_deepseek_v3_2_exp_resolves_to_the_same_geometry() -> None:
    """DeepSeek-V3.2-Exp and DeepSeek-V3.2 publish one architecture (DeepseekV32ForCausalLM) and
    the same shapes: 61 layers, kv_lora_rank 512, rope 64, index_head_dim 128."""
    for name in ("deepseek-ai/DeepSeek-V3.2-Exp", "DeepSeek-V3.2-Exp", "deepseek-v3.2-exp"):
        spec = resolve_model(name)
        assert spec.model_id == "deepseek-ai/DeepSeek-V3.2"
        assert (spec.kv.num_layers, spec.kv.kv_lora_rank, spec.kv.index_head_dim) == (61, 512, 128)


PR_11309 = Path(__file__).parent / "fixtures" / "logs" / "public"


@pytest.mark.parametrize(
    ("flags", "dtype", "how"),
    [
        # the KV size line: 43.67 GiB / 975,488 cells holds 61 x (656 + 132) = 48,068 B
        ({}, "fp8_e4m3", "KV Cache is allocated. #tokens: 975424, KV size: 43.67 GB"),
        ({"gpu": "B200"}, "fp8_e4m3", "DSA auto rule: fp8_e4m3 on B200 (compute capability 10.0)"),
        ({"gpu": "H200"}, "bfloat16", "DSA auto rule: bfloat16 on H200 (compute capability 9.0)"),
    ],
)
def test_explain_resolves_auto_kv_dtype_of_a_dsa_log_by_the_engine_rule(
    flags: dict[str, object], dtype: str, how: str
) -> None:
    """sgl-project/sglang pull request 11309 (8 x B200, no --kv-cache-dtype): `auto` is fp8_e4m3
    from compute capability 10.0; without --gpu, the printed KV size is the fp8 layout's."""
    text = (PR_11309 / "sglang-2025-deepseek-v3.2-exp-dp8-b200-indexer.log").read_text()
    inputs = explain_log(text, {"model": "deepseek-ai/DeepSeek-V3.2-Exp", **flags}).inputs
    assert inputs.kv_dtype.name == dtype
    assert how in inputs.kv_dtype_source.text


def test_sglang_dsa_fp8_pool_matches_logged_kv_sizes() -> None:
    """DeepSeek-V3.2-Exp (the same 61-layer geometry), SGLang on 8 x B200, fp8 KV, as logged in
    sgl-project/sglang pull request 11309: '#tokens: 975424, KV size: 43.67 GB' with the indexer,
    and before that change '#tokens: 1462784, KV size: 54.52 GB' without it (65.49 GB with)."""
    kv = _spec("deepseek-v3.2").kv
    fp8 = sglang_pool.dsa_kv_dtype((10, 0))
    # fp8 latent layout: 512 fp8 + 512 // 128 x 4 B of scales + 64 rope elements in bf16 = 656 B
    latent = 512 + 512 // 128 * 4 + 64 * 2
    cell = sglang_pool.dsa_pool_cell(kv, 61, fp8)
    assert cell == 61 * (latent + V32_INDEX) == 48_068
    gib = 2**30
    assert round(sglang_pool.kv_size_bytes(975_424, 64, cell) / gib, 2) == 43.67
    assert round(sglang_pool.kv_size_bytes(1_462_784, 64, 61 * latent) / gib, 2) == 54.52
    assert round(sglang_pool.kv_size_bytes(1_462_784, 64, cell) / gib, 2) == 65.49


@pytest.mark.parametrize(
    ("version", "per_token"),
    [
        (None, V32_LAYERS * (V32_LATENT + V32_INDEX)),  # v0.5.3 - v0.5.9 divide by the raw latent
        # get_cell_size_per_token in the v0.5.10 and v0.5.10.post1 wheels: still the raw latent
        ("0.5.10", V32_LAYERS * (V32_LATENT + V32_INDEX)),
        ("0.5.10.post1", V32_LAYERS * (V32_LATENT + V32_INDEX)),
        ("0.5.14", V32_LAYERS * (V32_LATENT + V32_INDEX)),
        ("0.5.16", V32_LAYERS * (V32_LATENT + V32_INDEX)),
        ("0.5.17", 48_068),  # _compute_cell_size calls calculate_mla_kv_cache_dim
        ("0.5.23", 48_068),
    ],
)
def test_sglang_dsa_fp8_budget_divisor_by_version(
    version: str | None, per_token: int, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--engine", "sglang", "--model", str(CONFIGS / "deepseek-v3.2.json"), "--gpu", "H200"]
    argv += ["--tp", "8", "--kv-cache-dtype", "fp8_e4m3"]
    if version:
        argv += ["--sglang-version", version]
    out = _plan(capsys, *argv)
    assert out["kv_bytes_per_token"] == per_token
    pool = {i["item"]: i for i in out["ledger"]}["KV cache pool"]
    assert "(tokens + page) x 48,068 B" in pool["source"]  # the pool allocates the fp8 layout


def test_sglang_hicache_host_pool_keeps_the_indexer_keys() -> None:
    # NSATokenToKVPoolHost.get_size_per_token: the MLA latent plus the indexer, layer by layer
    kv = _spec("deepseek-v3.2").kv
    bf16 = sglang_pool.dsa_kv_dtype((9, 0))
    assert hicache.host_bytes_per_token(kv, 8, 61, bf16) == V32_LAYERS * (V32_LATENT * 2 + 132)


def test_an_mla_model_without_index_topk_has_no_indexer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Kimi-K2-Instruct: 61 layers x (512 + 64) x 2 B, the seed scenario's 70,272 B
    model = str(CONFIGS / "kimi-k2-instruct.json")
    for engine in ("sglang", "vllm"):
        out = _plan(capsys, "--engine", engine, "--model", model, "--gpu", "B200", "--tp", "8")
        assert out["kv_bytes_per_token"] == 61 * (512 + 64) * 2 == 70_272
    assert _spec("kimi-k2-instruct").kv.index_head_dim == 0


def test_deepseek_v32_indexer_weights() -> None:
    # per layer: wq_b q_lora_rank x index_n_heads x index_head_dim (1536 x 64 x 128), and
    # wk hidden x index_head_dim (7168 x 128) + weights_proj hidden x index_n_heads (7168 x 64)
    # + k_norm weight and bias (2 x 128); replicated on every rank
    groups = {g.name: g for g in _spec("deepseek-v3.2").params}
    assert groups[INDEXER].count == 61 * 1536 * 64 * 128 == 767_557_632
    assert groups[INDEXER_KEYS].count == 61 * (7168 * 128 + 7168 * 64 + 2 * 128) == 83_967_232
    assert not groups[INDEXER].sharded and groups[INDEXER].quantized
    assert not groups[INDEXER_KEYS].quantized  # vLLM builds wk_weights_proj unquantized
    # the same checkpoint without its indexer is DeepSeek-V3's shape to the parameter
    v3 = {g.name: g.count for g in resolve_model("deepseek-v3").params}
    assert {n: c for n, c in ((g.name, g.count) for g in groups.values()) if n in v3} == v3


@pytest.mark.parametrize("name", ["minimax-m2.5", "minimax-m2.7"])
def test_minimax_m2_kv_and_parameters(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # 62 layers, 8 KV heads of head_dim 128: 62 x 8 x (128 + 128) x 2 B at TP1; one head per rank
    # at TP8
    for engine in ("sglang", "vllm"):
        out = _plan(
            capsys,
            *("--engine", engine, "--model", str(CONFIGS / f"{name}.json")),
            *("--gpu", "H200", "--tp", "8", "--context-length", "8192"),
        )
        assert out["kv_bytes_per_token"] == 62 * 1 * (128 + 128) * 2 == 31_744
    spec = _spec(name)
    assert spec.kv.num_kv_heads * (spec.kv.head_dim * 2) * 62 * 2 == 253_952
    h, heads, kv, hd, experts, inter, vocab = 3072, 48, 8, 128, 256, 1536, 200_064
    per_layer = (
        2 * h * heads * hd  # q_proj, o_proj
        + 2 * h * kv * hd  # k_proj, v_proj
        + experts * 3 * h * inter  # w1, w2, w3 of 256 experts
        + experts * h
        + experts  # router gate and its e_score_correction_bias
        + 2 * h
        + (heads + kv) * hd  # two RMSNorms, q_norm over 6144 and k_norm over 1024
    )
    total = 62 * per_layer + 2 * vocab * h + h  # embed_tokens, lm_head, final norm
    assert spec.total_params == total == 228_689_764_864
    # MiniMaxM2Attention: rotary_dim 64 of head_dim 128 is rotated, max_position_embeddings rows
    rope = {g.name: g.count for g in spec.load_buffers}["rope_cache"]
    assert rope == int(_config(name)["max_position_embeddings"]) * 64


def test_fp8_block_checkpoint_spares_the_router_by_name() -> None:
    # MiniMax-M2.5 modules_to_not_convert: gate, e_score_correction_bias, lm_head
    spec = _spec("minimax-m2.5")
    assert spec.quantization is not None
    assert spec.quantization.bytes_per_param == (8 + 32 / (128 * 128)) / 8
    quantized = {g.name for g in spec.params if g.quantized}
    assert quantized == {ATTENTION, ATTENTION_KV, ROUTED_EXPERTS}


def test_modelopt_nvfp4_wildcards_exclude_attention() -> None:
    # nvidia/MiniMax-M2.5-NVFP4 excludes `model.layers.N.self_attn*` and the routers: only the
    # experts are e2m1 with an fp8 scale per 16 weights, (4 + 8 / 16) / 8 B a weight
    spec = _spec("minimax-m2.5-nvfp4")
    assert spec.quantization is not None
    assert (spec.quantization.method, spec.quantization.bytes_per_param) == ("nvfp4", 0.5625)
    assert {g.name for g in spec.params if g.quantized} == {ROUTED_EXPERTS}


@pytest.mark.parametrize("name", ["deepseek-v3.1-nvfp4", "deepseek-v3.2-nvfp4"])
def test_hf_quant_config_beside_config_json(name: str, tmp_path: Path) -> None:
    """Older ModelOpt checkpoints state their format in hf_quant_config.json only."""
    folder = CONFIGS / name
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    spec = resolve_model(str(folder))
    assert spec.quantization is not None and spec.quantization.method == "nvfp4"
    groups = {g.name: g for g in spec.params}
    # exclude_modules names every layer's q_a/q_b/kv_a/kv_b projections and lm_head
    assert groups[ROUTED_EXPERTS].quantized and not groups[ATTENTION].quantized
    # the same config.json alone is a bf16 checkpoint
    shutil.copy(folder / "config.json", tmp_path / "config.json")
    assert resolve_model(str(tmp_path)).quantization is None
    # and a malformed quantization file beside it is refused by name
    (tmp_path / "hf_quant_config.json").write_text("[1]")
    with pytest.raises(KvtierError, match=r"hf_quant_config\.json"):
        resolve_model(str(tmp_path))


def test_llama4_maverick_interleaves_moe_and_chunked_attention(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = _spec("llama-4-maverick")
    # interleave_moe_layer_step 2: 24 of 48 layers route to 128 experts, every 4th layer global
    assert (spec.num_experts, spec.kv.num_full_layers, spec.kv.num_local_layers) == (128, 12, 36)
    # vLLM v0.13.0 turns the hybrid KV cache manager off for chunked local attention and keeps
    # every layer as full: 48 layers x 8/8 heads x 256 x 2 B at TP8
    out = _plan(
        capsys,
        *("--engine", "vllm", "--model", str(CONFIGS / "llama-4-maverick.json")),
        *("--gpu", "H200", "--tp", "8", "--max-model-len", "8192", "--vllm-version", "0.13.0"),
    )
    assert out["kv_bytes_per_token"] == 48 * 1 * 256 * 2 == 24_576


@pytest.mark.parametrize(
    ("name", "edit", "named"),
    [
        ("deepseek-v3.2", lambda c: c.update(index_topk=None), "without `index_topk`"),
        ("deepseek-v3.2", lambda c: c.update(index_kpool=2), "`index_kpool` 2"),
        ("deepseek-v3.2", lambda c: c.update(indexer_types=["full"] * 61), "`indexer_types`"),
        ("deepseek-v3.2", lambda c: c.update(index_head_dim="128"), "`index_head_dim`"),
        ("kimi-k2-instruct", lambda c: c.update(index_topk=2048), "'index_head_dim'"),
        ("minimax-m2.5", lambda c: c.update(shared_intermediate_size=512), "shared_intermediate"),
        ("minimax-m2.5", lambda c: c.update(qk_norm_type="per_head"), "qk_norm_type"),
        ("minimax-m2.5", lambda c: c.pop("rotary_dim"), "'rotary_dim'"),
        ("minimax-m2.5", lambda c: c.update(architectures=["MiniMaxM3ForCausalLM"]), "M3"),
    ],
)
def test_unknown_shapes_of_the_new_families_fail_closed(name: str, edit: Any, named: str) -> None:
    config = copy.deepcopy(_config(name))
    edit(config)
    with pytest.raises(KvtierError, match=named):
        model_from_config(config, name)


def test_glm4_moe_router_in_float32_and_half_rotary() -> None:
    # 92 layers, the first 3 dense: 89 routers of 160 x 5120 weights + 160 correction biases, in
    # float32 on every rank; RoPE over 0.5 x 128 = 64 dims of 202,752 positions, in bfloat16
    spec = resolve_model(str(CONFIGS / "glm-4.7-fp8.json"))
    groups = {g.name: g for g in weight_bytes(spec, 8).groups}
    assert groups[ROUTER_FP32].bytes_per_rank == 89 * (160 * 5120 + 160) * 4
    assert groups[ROPE_CACHE].bytes_per_rank == 202_752 * 64 * 2
    assert spec.kv.num_layers * spec.kv.elements_per_token_per_layer(1) * 2 == 92 * 8 * 256 * 2


# GLM-5: 78 layers, kv_lora_rank 512 + qk_rope_head_dim 64, index_head_dim 128 (the vendored
# GLM-5-FP8 file states no index_* fields: transformers' GlmMoeDsaConfig defaults supply them)
GLM5_LAYERS = 78


@pytest.mark.parametrize(
    ("engine", "extra", "per_token"),
    [
        ("sglang", (), GLM5_LAYERS * (V32_LATENT * 2 + V32_INDEX)),  # 100,152
        ("vllm", (), GLM5_LAYERS * (V32_LATENT * 2 + V32_INDEX)),
        ("vllm", ("--kv-cache-dtype", "fp8"), GLM5_LAYERS * (656 + V32_INDEX)),  # 61,464
    ],
)
def test_glm5_is_deepseek_sparse_attention(
    engine: str, extra: tuple[str, ...], per_token: int, capsys: pytest.CaptureFixture[str]
) -> None:
    model = str(CONFIGS / "glm-5-fp8.json")
    out = _plan(
        capsys, "--engine", engine, "--model", model, "--gpu", "MI355X", "--tp", "8", *extra
    )
    assert out["kv_bytes_per_token"] == per_token


def _mla_attention(h: int, heads: int, q_lora: int, dims: tuple[int, int, int, int]) -> int:
    """One MLA attention layer's parameters (DeepSeek-V2's modules) for hidden size `h`: `dims`
    are kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim."""
    kv_lora, nope, rope, v = dims
    return (
        h * q_lora
        + h * (kv_lora + rope)  # q_a_proj, kv_a_proj_with_mqa
        + q_lora * heads * (nope + rope)
        + kv_lora * heads * (nope + v)
        + heads * v * h
        + q_lora
        + kv_lora
        + 2 * h  # q_a / kv_a layernorms, input / post-attention norms
    )


def test_glm5_parameters_by_hand() -> None:
    # MLA with q_lora 2048, 64 heads of nope 192 + rope 64 and v 256; the DSA indexer (32 heads
    # of 128); 3 dense layers then 75 MoE layers of 256 experts + 1 shared, no router bias (the
    # vendored file states no topk_method)
    spec = resolve_model(str(CONFIGS / "glm-5-fp8.json"))
    h, n, q_lora = 6144, 78, 2048
    indexer = q_lora * 32 * 128 + h * 128 + h * 32 + 2 * 128  # wq_b, wk, weights_proj, k_norm
    attn = _mla_attention(h, 64, q_lora, (512, 192, 64, 256)) + indexer
    dense, moe = 3 * h * 12288, 256 * 3 * h * 2048 + 3 * h * 2048 + 256 * h
    total = n * attn + 3 * dense + 75 * moe + 2 * 154_880 * h + h
    assert spec.total_params == total == 743_911_199_232


@pytest.mark.parametrize(("engine", "per_token"), [("sglang", 100_152), ("vllm", 61_464)])
def test_glm5_nvfp4_folder_plans_on_both_engines(
    engine: str, per_token: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # config.json beside an hf_quant_config.json of NVFP4 weights and kv_cache_quant_algo FP8,
    # which vLLM (from v0.19) applies to the pool: 78 x (656 + 132) B; SGLang keeps bf16 on an
    # H200: 78 x (576 x 2 + 132) B
    spec = resolve_model(str(CONFIGS / "glm-5-nvfp4"))
    assert spec.quantization is not None and spec.quantization.method == "nvfp4"
    folder = str(CONFIGS / "glm-5-nvfp4")
    out = _plan(capsys, "--engine", engine, "--model", folder, "--gpu", "H200", "--tp", "8")
    assert out["kv_bytes_per_token"] == per_token
    assert per_token in (
        GLM5_LAYERS * (656 + V32_INDEX),
        GLM5_LAYERS * (V32_LATENT * 2 + V32_INDEX),
    )


def test_glm47_flash_parameters_by_hand() -> None:
    # DeepSeek-V2 MLA (q_lora 768, 20 heads of nope 192 + rope 64, v 256), one dense layer, then
    # 46 MoE layers of 64 experts + 1 shared and GLM-4's float32 router with its correction bias
    spec = _spec("glm-4.7-flash")
    h, n = 2048, 47
    attn = _mla_attention(h, 20, 768, (512, 192, 64, 256))
    moe = 64 * 3 * h * 1536 + 3 * h * 1536 + (64 * h + 64)
    total = n * attn + 3 * h * 10240 + 46 * moe + 2 * 154_880 * h + h
    assert spec.total_params == total == 29_943_393_920
    routers = {g.name: g for g in weight_bytes(spec, 1).groups}[ROUTER_FP32]
    assert routers.bytes_per_rank == 46 * (64 * h + 64) * 4


@pytest.mark.parametrize(
    ("name", "edit", "named"),
    [
        ("glm-4.7-flash", lambda c: c.pop("first_k_dense_replace"), "first_k_dense_replace"),
        ("glm-4.7-flash", lambda c: c.update(moe_layer_freq=2), "moe_layer_freq"),
        (
            "glm-5-fp8",
            lambda c: c.update(architectures=["Glm5NextForConditionalGeneration"]),
            "unsupported architectures entry 'Glm5NextForConditionalGeneration'",
        ),
    ],
)
def test_glm_shapes_kvtier_does_not_size_fail_closed(name: str, edit: Any, named: str) -> None:
    config = _config(name)
    edit(config)
    with pytest.raises(KvtierError, match=named):
        model_from_config(config, name)


# Granite-4.0-H-Small: 4 attention layers of 8 KV heads x 128; 36 Mamba2 layers of 128 heads x
# 64 over a state of 128, one group, conv kernel 4 (conv_dim = 2 x 4096 + 2 x 1 x 128 = 8,448)
GRANITE_KV = 4 * 8 * (128 + 128) * 2  # 16,384 B a token at bf16, TP1
GRANITE_CONV = 8448 * (4 - 1)  # elements per layer, TP1
GRANITE_SSM = 128 * 64 * 128
# LFM2-1.2B: 6 attention layers of 8 KV heads x 64; 10 short-conv layers over 2,048 channels
LFM2_KV = 6 * 8 * (64 + 64) * 2  # 12,288 B
LFM2_CONV = 2048 * (3 - 1)


@pytest.mark.parametrize(
    ("name", "tp", "kv", "sglang_slot", "vllm_page"),
    [
        # SGLang: conv in bf16, SSM in float32; vLLM: both in the model dtype (auto)
        ("granite-4.0-h-small", 1, GRANITE_KV, 36 * (GRANITE_CONV * 2 + GRANITE_SSM * 4),
         GRANITE_CONV * 2 + GRANITE_SSM * 2),
        # TP2: the one group widens to 2 (extra_groups_for_head_shards): conv_dim 8,704 / 2
        ("granite-4.0-h-small", 2, GRANITE_KV // 2,
         36 * (4352 * 3 * 2 + GRANITE_SSM // 2 * 4), 4352 * 3 * 2 + GRANITE_SSM // 2 * 2),
        ("lfm2-1.2b", 1, LFM2_KV, 10 * LFM2_CONV * 2, LFM2_CONV * 2),  # no SSM state
        ("lfm2-1.2b", 2, LFM2_KV // 2, 10 * LFM2_CONV // 2 * 2, LFM2_CONV // 2 * 2),
    ],
)  # fmt: skip
def test_state_space_hybrids_kv_and_state_bytes_by_hand(
    name: str, tp: int, kv: int, sglang_slot: int, vllm_page: int
) -> None:
    spec = _spec(name)
    state = spec.kv.linear
    assert state is not None
    assert spec.kv.elements_per_token_per_layer(tp) * spec.kv.num_layers * 2 == kv
    assert sglang_mamba.state_bytes(state, tp, "float32") == sglang_slot
    assert vllm_mamba.state_page_bytes(state, tp, "bfloat16", "bfloat16") == vllm_page
    bf16 = resolve_kv_dtype(Engine.VLLM, "auto", "bfloat16")
    assert vllm_pool.page_bytes(spec.kv, tp, 1, bf16) * spec.kv.num_layers == kv


def test_state_space_hybrids_by_hand_figures() -> None:
    assert (GRANITE_KV, 36 * (GRANITE_CONV * 2 + GRANITE_SSM * 4)) == (16_384, 152_819_712)
    assert (LFM2_KV, 10 * LFM2_CONV * 2) == (12_288, 81_920)
    # vLLM: Granite's 2,147,840 B state page over 4,096 B of attention a token and layer makes
    # 16 x cdiv(2,147,840, 65,536) = 528-token blocks; LFM2's 8,192 B fits one 16-token block
    assert vllm_mamba.attention_block_size(2_147_840, 4096, 16) == 528
    assert vllm_mamba.attention_block_size(8192, 2048, 16) == 16


def test_state_space_hybrid_parameters_match_the_published_totals() -> None:
    """The rebuilt fixtures (SOURCES.md) against the model cards: Granite-4.0-H-Small 32 B total,
    9 B active; LFM2-1.2B 1.17 B."""
    granite = _spec("granite-4.0-h-small")
    # per Mamba2 layer: in_proj 4,096 x (8,192 + 8,448 + 128), conv 8,448 x 4 + bias 8,448,
    # dt_bias / A / D 3 x 128, out_proj 8,192 x 4,096
    mixer = 4096 * (8192 + 8448 + 128) + 8448 * 4 + 8448 + 3 * 128 + 8192 * 4096
    groups = {g.name: g.count for g in granite.params}
    assert groups["mamba_mixer"] == 36 * mixer
    assert groups[ROUTED_EXPERTS] == 40 * 72 * 3 * 4096 * 768
    assert round(granite.total_params / 1e9, 1) == 32.2
    assert round(granite.active_params / 1e9, 1) == 8.8
    assert not granite.load_buffers  # NoPE: no rotary cache
    # the widths the engines' activation models read: the shared MLP, one expert
    assert (granite.intermediate_size, granite.moe_intermediate_size) == (1536, 768)
    lfm2 = _spec("lfm2-1.2b")
    # block_ff_dim 12,288 -> int(2 x 12,288 / 3) = 8,192, a multiple of 256 already
    assert {g.name: g.count for g in lfm2.params}["dense_mlp"] == 16 * 3 * 2048 * 8192
    assert round(lfm2.total_params / 1e9, 2) == 1.17
    assert lfm2.intermediate_size == 8192  # the width the engines' activation models read
