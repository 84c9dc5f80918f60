"""Gemma 4 on both engines: two KV shapes per layer type, KV-shared layers.

Per-layer KV bytes come from the config and are checked against hand calculations from each
engine's own rule: vLLM v0.21.0 (models/gemma4.py, kv_cache_utils.unify_kv_cache_spec_page_size;
KV-shared layers hold no page) and SGLang v0.5.11 / v0.5.23 (HybridSWAPoolConfigurator: a full
and an SWA pool of their own cell sizes, KV-shared layers allocated like the rest).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cli_support import error_line
from kvtier.engines.deployment import Deployment, Engine, FreeMemory, Measured, Profile
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.sglang import gemma4 as sglang_gemma4
from kvtier.engines.sglang import swa
from kvtier.engines.version import Version
from kvtier.engines.vllm import gemma4 as vllm_gemma4
from kvtier.errors import KvtierError, UnsupportedModel
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import plan
from kvtier.model.catalog import catalog_entry, resolve_model
from kvtier.model.config import kv_geometry, model_from_config
from kvtier.model.description import LayerKind
from kvtier.units import GiB
from test_engines_roundtrip import Case, render

BF16 = KVDtype("bfloat16", 2)
FP8 = KVDtype("fp8_e4m3", 1)
# google/gemma-4-E2B-it's text_config (the fields kvtier reads): 35 layers of four sliding then
# one full, the last 20 reading the KV of layers 13 (sliding) and 14 (full)
E2B_TEXT: dict[str, Any] = {
    "hidden_size": 1536,
    "num_hidden_layers": 35,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "global_head_dim": 512,
    "attention_k_eq_v": False,
    "num_kv_shared_layers": 20,
    "sliding_window": 512,
    "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7,
}


def _g31() -> Deployment:
    return Deployment(Engine.VLLM, "gemma-4-31b", tp=1, gpu="H200", engine_version="0.21.0",
                      measured=Measured(profile=Profile(kv_available_gib=100.0)))  # fmt: skip


def test_31b_layers_hold_two_shapes() -> None:
    """gemma-4-31B-it: 50 sliding layers of 16 heads x 256, 10 full ones of 4 heads x 512
    (num_global_key_value_heads under attention_k_eq_v), K and V both cached."""
    kv = resolve_model("gemma-4-31b").kv
    assert (kv.num_local_layers, kv.num_full_layers, kv.kv_shared_layers) == (50, 10, 0)
    assert kv.layer_elements(LayerKind.SLIDING, 1) * 2 == 16 * 2 * 256 * 2 == 16_384
    assert kv.layer_elements(LayerKind.FULL, 1) * 2 == 4 * 2 * 512 * 2 == 8_192
    # TP8: 16 / 8 = 2 sliding heads, 4 global heads replicated to 1 a rank
    assert kv.layer_elements(LayerKind.SLIDING, 8) == 2 * 2 * 256
    assert kv.layer_elements(LayerKind.FULL, 8) == 1 * 2 * 512
    assert not kv.is_uniform
    with pytest.raises(UnsupportedModel):
        kv.elements_per_token_per_layer(1)


def test_e2b_shared_layers_hold_no_kv_on_vllm_but_are_allocated_on_sglang() -> None:
    """E2B: vLLM pages the first 15 layers only (12 sliding x 1 head x 256, 3 full x 1 x 512);
    SGLang sizes its two pools over all 35 (28 sliding, 7 full)."""
    kv = kv_geometry("Gemma4ForCausalLM", E2B_TEXT)
    assert kv.kv_shared_layers == 20
    assert kv.kv_holding_kinds.count(LayerKind.SLIDING) == 12
    assert kv.kv_holding_kinds.count(LayerKind.FULL) == 3
    assert vllm_gemma4.bytes_per_token(kv, 1, BF16) == 12 * 1 * 512 * 2 + 3 * 1 * 1024 * 2
    full, sliding = swa.layer_cells(kv, 1, BF16)
    assert (full, sliding) == (1 * 1024 * 2, 1 * 512 * 2)
    assert full * kv.num_full_layers + sliding * kv.num_local_layers == 7 * 2048 + 28 * 1024


def test_vllm_unifies_the_pages_by_growing_the_smaller_block() -> None:
    """unify_kv_cache_spec_page_size: 31B's full page (4 x 1024 x 2 B x 16 = 131,072) is half the
    sliding one (16 x 512 x 2 x 16 = 262,144), so full blocks hold 32 tokens; in E2B the
    sliding page is the smaller and its blocks grow instead."""
    pages = vllm_gemma4.pages(resolve_model("gemma-4-31b").kv, 1, 16, BF16)
    assert pages == vllm_gemma4.Gemma4Pages(262_144, 32, 16, 10, 50)
    e2b = vllm_gemma4.pages(kv_geometry("Gemma4ForCausalLM", E2B_TEXT), 1, 16, FP8)
    assert e2b == vllm_gemma4.Gemma4Pages(16 * 1024, 16, 32, 3, 12)


def test_vllm_31b_pool_by_hand() -> None:
    """100 GiB on vLLM v0.21.0: 1 full + 5 sliding groups of 10 layers, blocks = 100 x 2^30 //
    262,144 // 10; a 262,144-token request holds 262,144 / 32 full blocks plus
    5 x (cdiv(1023 + 8,192, 16) + 1) sliding ones; the log's tokens are int(blocks / that x len)."""
    ledger = plan(_g31())
    blocks = int(100 * GiB) // 262_144 // 10
    per_request = 262_144 // 32 + 5 * (-(-(1023 + 8192) // 16) + 1)
    assert (blocks, per_request) == (40_960, 11_077)
    assert ledger.kv_tokens == int(blocks / per_request * 262_144) == 969_343
    assert ledger.kv_bytes_per_token == 10 * 8_192 + 50 * 16_384


def test_sglang_31b_pools_by_hand() -> None:
    """SGLang v0.5.23 (Era C): full tokens = int(rest x 2^30) // (8,192 x 10 + 0.8 x 16,384 x 50),
    SWA tokens = int(full x 0.8); rest = free after load - free before x (1 - fraction), less
    the 100 MiB multimodal embedding cache (v0.5.18+)."""
    measured = Measured(free=FreeMemory(before_load_gib=139.0, after_load_gib=80.0))
    d = Deployment(Engine.SGLANG, "gemma-4-31b", tp=1, gpu="H200", engine_version="0.5.23",
                   mem_fraction=0.85, measured=measured)  # fmt: skip
    ledger = plan(d)
    rest = 80.0 - 139.0 * (1 - 0.85) - 100 / 1024
    full = int(int(rest * GiB) // (8_192 * 10 + 0.8 * 16_384 * 50))
    assert ledger.kv_tokens == full
    assert ledger.kv_bytes_per_token == 8_192 * 10 + 16_384 * 50
    pool = next(i for i in ledger.items if i.item == "KV cache pool")
    swa_tokens = int(full * 0.8)
    expected = (full + 1) * 8_192 * 10 + (swa_tokens + 1) * 16_384 * 50
    assert pool.gib == pytest.approx(expected / GiB)


def test_sglang_era_c_split_with_two_cells() -> None:
    """era_c_tokens prices each pool at its own cell: E2B at TP1 in bf16 (F 2,048 B x 7 full
    layers, S 1,024 B x 28 sliding ones, the shared layers included), page 64."""
    kv = kv_geometry("Gemma4ForCausalLM", E2B_TEXT)
    split = swa.era_c_tokens(10.0, kv, 1, BF16, 64, 0.8, None)
    full = int(int(10 * GiB) // (2048 * 7 + 0.8 * 1024 * 28)) // 64 * 64
    assert split == swa.SwaTokens(full, int(full * 0.8) // 64 * 64)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"num_global_key_value_heads": 2}, "without `attention_k_eq_v`"),
        ({"global_head_dim": None}, "without `global_head_dim`"),
        ({"num_kv_shared_layers": 35}, "num_kv_shared_layers 35 of 35 layers"),
        ({"layer_types": ["full_attention"] * 34 + ["sliding_attention"]}, None),
        ({"layer_types": ["chunked_attention"] * 35}, "layer_types entry 'chunked_attention'"),
    ],
)
def test_geometry_refusals_name_the_field(change: dict[str, Any], words: str | None) -> None:
    text = {**E2B_TEXT, **change}
    if words is None:  # the last layer is forced to full attention, as transformers does
        assert kv_geometry("Gemma4ForCausalLM", text).layer_kinds[-1] is LayerKind.FULL
        return
    with pytest.raises(UnsupportedModel, match=words.replace("(", r"\(")):
        kv_geometry("Gemma4ForCausalLM", text)


def test_uncounted_parts_are_refused() -> None:
    """Per-layer embeddings (E2B / E4B), an MoE block without its sizes, the audio tower."""
    e2b = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", **E2B_TEXT,
           "hidden_size_per_layer_input": 256, "vocab_size": 262144}  # fmt: skip
    with pytest.raises(UnsupportedModel, match="per-layer embeddings"):
        model_from_config(e2b, "e2b")
    moe = {**e2b, "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0,
           "enable_moe_block": True}  # fmt: skip
    with pytest.raises(UnsupportedModel, match="without num_experts, top_k_experts"):
        model_from_config(moe, "moe")
    entry = catalog_entry("gemma-4-31b")
    assert entry is not None
    config = copy.deepcopy(entry.config)
    config["audio_config"] = {"model_type": "gemma4_audio"}
    with pytest.raises(UnsupportedModel, match="audio tower"):
        model_from_config(config, "31b-audio")


def test_31b_parameters_as_the_engines_build_them() -> None:
    """Text decoder by hand: per layer q / o (32 heads x width), fused k / v slots of the layer's
    own heads (V kept on the attention_k_eq_v layers), a 3-matrix MLP; the embedding tied."""
    model = resolve_model("gemma-4-31b")
    groups = {g.name: g.count for g in model.params}
    h = 5376
    assert groups["attention"] == 50 * 2 * h * 32 * 256 + 10 * 2 * h * 32 * 512
    assert groups["attention_kv"] == 50 * 2 * h * 16 * 256
    assert groups["attention_kv_full"] == 10 * 2 * h * 4 * 512
    assert groups["dense_mlp"] == 60 * 3 * h * 21504
    assert groups["embedding"] == 262144 * h
    assert "lm_head" not in groups
    # two RoPE caches of 262,144 positions: 512 wide (proportional) and 256 wide
    assert model.load_buffers[0].count == 262_144 * (512 + 256)
    # the checkpoint holds no V on the 10 attention_k_eq_v layers: 30.7B text parameters, as
    # published
    text = model.total_params - groups["vision_tower"]
    assert round((text - 10 * h * 4 * 512) / 1e9, 1) == 30.7


def test_26b_a4b_by_hand() -> None:
    """gemma-4-26B-A4B-it: 25 sliding layers of 8 heads x 256 (8,192 B in bf16), 5 full ones of
    2 x 512 (4,096 B); vLLM's full blocks hold 32 tokens. Each layer runs its dense MLP (2,112)
    beside 128 experts of 704 (8 a token) and a replicated router; 3.8B active without the
    vision tower, as published."""
    model = resolve_model("gemma-4-26b-a4b")
    kv = model.kv
    assert kv.layer_elements(LayerKind.SLIDING, 1) * 2 == 8 * 512 * 2
    assert kv.layer_elements(LayerKind.FULL, 1) * 2 == 2 * 1024 * 2
    assert vllm_gemma4.pages(kv, 1, 16, BF16) == vllm_gemma4.Gemma4Pages(131_072, 32, 16, 5, 25)
    h = 2816
    groups = {g.name: g for g in model.params}
    assert groups["routed_experts"].count == 30 * 128 * 3 * h * 704
    assert groups["routed_experts"].active == 30 * 8 * 3 * h * 704
    assert groups["router"].count == 30 * (h * 128 + h + 128)
    assert groups["dense_mlp"].count == 30 * 3 * h * 2112
    assert (model.num_experts, model.experts_per_token) == (128, 8)
    text_active = model.active_params - groups["vision_tower"].count
    assert round(text_active / 1e9, 1) == 3.8


@pytest.mark.parametrize(
    ("engine", "version", "words"),
    [
        ("vllm", "0.20.0", "modelled for v0.21.0 - v0.25.x, not 0.20.0"),
        ("vllm", "0.26.0", "bounds sliding groups by max_in_flight_tokens"),
        ("sglang", "0.5.10", "SGLang runs Gemma 4 from v0.5.11"),
        ("sglang", None, "SGLang runs Gemma 4 from v0.5.11"),
    ],
)
def test_releases_outside_the_rules_are_refused(
    capsys: pytest.CaptureFixture[str], engine: str, version: str | None, words: str
) -> None:
    argv = ["plan", "--engine", engine, "--model", "gemma-4-31b", "--gpu", "H200"]
    if version:
        argv += [f"--{engine}-version", version]
    assert words in error_line(capsys, argv)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--engine", "vllm", "--pp", "2"], "pipeline parallelism"),
        (["--", "vllm", "serve", "google/gemma-4-31B-it", "--kv-transfer-config",
          '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'], "a KV connector"),
        (["--engine", "sglang", "--sglang-version", "0.5.23", "--gpu", "B200"], "--page-size"),
        (["--engine", "sglang", "--sglang-version", "0.5.23", "--hicache-ratio", "2"],
         "hierarchical cache"),
    ],
)  # fmt: skip
def test_unmodelled_deployments_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    base = ["plan", "--model", "gemma-4-31b"]
    if "--gpu" not in argv:
        base += ["--gpu", "H200"]
    assert words in error_line(capsys, base + argv)


def test_simulate_refuses_two_head_widths(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--engine", "vllm", "--model", "gemma-4-31b", "--gpu", "H200"]
    line = error_line(capsys, [*argv, "--generate", "chat", "--requests", "10"])
    assert "simulating layers of two head widths (Gemma 4) is not modelled" in line


def test_refusals_are_kvtier_errors() -> None:
    with pytest.raises(KvtierError, match="does not divide the largest page"):
        kv = kv_geometry("Gemma4ForCausalLM", {**E2B_TEXT, "global_head_dim": 384})
        vllm_gemma4.pages(kv, 1, 16, BF16)


@pytest.mark.parametrize(("engine", "version"), [("sglang", "0.5.23"), ("vllm", "0.21.0")])
def test_plan_lines_explain_back_to_the_same_count(engine: str, version: str) -> None:
    """The lines each engine prints for a planned Gemma 4 start (test_engines_roundtrip's
    renderer) explain back to the planned count, on the same two-shape pools."""
    if engine == "sglang":
        measured = Measured(free=FreeMemory(before_load_gib=139.0, after_load_gib=80.0))
        d = Deployment(Engine.SGLANG, "gemma-4-31b", tp=1, gpu="H200", engine_version=version,
                       measured=measured)  # fmt: skip
    else:
        d = Deployment(Engine.VLLM, "gemma-4-31b", tp=1, gpu="H200", engine_version=version,
                       mem_fraction=0.9, page_size=16, context_length=32768,
                       measured=Measured(profile=Profile(kv_available_gib=60.5)))  # fmt: skip
    ledger = plan(d)
    text = render(Case(d, print_fraction=True, print_begin=True), ledger)
    flags: dict[str, object] = {"gpu": "H200", "engine_version": version, "model": "gemma-4-31b"}
    rec = explain_log(text, flags).reconciliation
    assert rec.observed is not None and rec.observed.value == ledger.kv_tokens
    assert rec.predicted == ledger.kv_tokens
    # vLLM's two-shape pool is checked as any grouped pool is (Ledger.count_cell), not skipped
    assert not rec.warnings


def test_sglang_refuses_a_text_only_gemma4_file() -> None:
    """SGLang rewrites the shapes only for model_type gemma4 (the wrapper)."""
    v0_5_23 = Version.release_of(0, 5, 23)
    with pytest.raises(KvtierError, match="Gemma4ForCausalLM is not modelled"):
        sglang_gemma4.check_runs("Gemma4ForCausalLM", v0_5_23, BF16, None, None, ())
    sglang_gemma4.check_runs("Gemma4ForConditionalGeneration", v0_5_23, BF16, None, None, ())


def test_26b_a4b_weights_match_a_public_vllm_log() -> None:
    """A public vLLM log of google/gemma-4-26B-A4B on one A100 (a blog post of April 2026 that
    records vLLM startups on an A100, --max-model-len 131072) prints 'Model loading took 48.5
    GiB': the engine-built parameters (V slots on the k_eq_v layers, the vision tower) plus the
    two RoPE caches give 48.47 GiB."""
    d = Deployment(Engine.VLLM, "gemma-4-26b-a4b", tp=1, gpu="A100 80GB",
                   engine_version="0.21.0", context_length=131072)  # fmt: skip
    weights = plan(d).item("weights").gib
    assert round(weights, 1) == 48.5
    assert weights == pytest.approx(25_820_354_096 * 2 / GiB + 262_144 * 768 * 2 / GiB)
