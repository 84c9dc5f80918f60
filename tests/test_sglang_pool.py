"""SGLang pool rules: cell sizes, the budget formula, page rounding, defaults, HiCache sizing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.sglang import hicache
from kvtier.engines.sglang import pool as sglang
from kvtier.engines.sglang.defaults import default_mem_fraction, vlm_factor
from kvtier.engines.sglang.pool import FractionRule, PoolEra
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.config import model_from_config
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind, ModelSpec
from kvtier.units import GB, GiB

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
BF16 = KVDtype("bfloat16", 2)
FP8 = KVDtype("fp8_e4m3", 1)


def mha(layers: int, heads: int, head_dim: int = 128, sliding: int = 0) -> KVGeometry:
    kinds = (LayerKind.FULL,) * (layers - sliding) + (LayerKind.SLIDING,) * sliding
    return KVGeometry(
        AttentionKind.MHA,
        heads,
        head_dim,
        head_dim,
        kinds,
        sliding_window=4096 if sliding else None,
    )


MLA = KVGeometry(
    AttentionKind.MLA, 1, 576, 0, (LayerKind.FULL,) * 61, kv_lora_rank=512, qk_rope_head_dim=64
)


def test_mla_cell_is_one_latent_not_split_by_tp() -> None:
    """DeepSeek-V3 / Kimi: (512 + 64) x 61 x 2 B = 70,272 B on every rank at any TP."""
    assert sglang.cell_size(MLA, 1, 61, BF16) == 70_272
    assert sglang.cell_size(MLA, 8, 61, BF16) == 70_272
    assert sglang.cell_size(MLA, 8, 61, FP8) == 35_136


def test_gqa_cell_splits_heads_and_replicates_past_kv_heads() -> None:
    qwen3_14b = mha(40, 8)
    assert sglang.cell_size(qwen3_14b, 4, 40, BF16) == 2 * 256 * 40 * 2  # 40,960
    assert sglang.cell_size(qwen3_14b, 8, 40, BF16) == sglang.cell_size(qwen3_14b, 16, 40, BF16)


def test_fp4_cell_halves_and_adds_block_scales() -> None:
    fp4 = resolve_kv_dtype(Engine.SGLANG, "fp4_e2m1", "bfloat16")
    kv = mha(32, 8)
    plain = 8 * 256 * 32
    assert sglang.cell_size(kv, 1, 32, fp4) == plain // 2 + (8 * 128 * 32 * 2) // 16


def test_rest_uses_free_before_load_not_card_total() -> None:
    """21.71 - 94.04 x (1 - 0.88) = 10.4252 GiB (the seed's 95.6 GB total gives 10.24)."""
    assert sglang.rest_gib(94.04, 21.71, 0.88) == pytest.approx(10.4252)


@given(
    rest=st.floats(0.1, 200.0),
    cell=st.integers(1_000, 400_000),
    page=st.sampled_from([1, 16, 32, 64]),
)
def test_tokens_are_whole_pages_that_fit(rest: float, cell: int, page: int) -> None:
    tokens = sglang.profile_tokens(rest, cell, page, None)
    assert tokens % page == 0
    assert tokens * cell <= rest * GiB
    assert (tokens + page) * cell > int(rest * GiB) - cell  # no more than a page left over


@given(st.floats(0.5, 0.95), st.floats(0.5, 0.95))
def test_tokens_grow_with_the_fraction(a: float, b: float) -> None:
    lo, hi = sorted((a, b))

    def tokens(f: float) -> int:
        return sglang.profile_tokens(max(sglang.rest_gib(80.0, 60.0, f), 0.0), 70_272, 1, None)

    assert tokens(lo) <= tokens(hi)


def test_not_enough_memory_names_the_fraction_that_fits() -> None:
    err = sglang.not_enough_memory(94.04, 5.0)
    assert "increase --mem-fraction-static above 0.947" in str(err)


def test_max_total_tokens_caps_before_page_rounding() -> None:
    assert sglang.profile_tokens(10.0, 70_272, 64, 100_000) == 99_968


def test_hybrid_swa_split_keeps_the_bytes() -> None:
    kv = mha(48, 8, sliding=40)
    swa = sglang.hybrid_swa_tokens(100_000, kv, 1, 1, 0.8)
    per_layer = 8 * 256
    assert swa.full_tokens == int(100_000 * 48 / (8 + 0.8 * 40))  # 120,000
    assert swa.swa_tokens == int(swa.full_tokens * 0.8)
    used = swa.full_tokens * per_layer * 8 + swa.swa_tokens * per_layer * 40
    assert used <= 100_000 * per_layer * 48


def test_all_sliding_window_refused() -> None:
    kv = KVGeometry(AttentionKind.MHA, 8, 128, 128, (LayerKind.SLIDING,) * 4, sliding_window=64)
    with pytest.raises(KvtierError, match="all-sliding"):
        sglang.check_layers(kv)


def test_req_to_token_rows_clamp() -> None:
    assert sglang.max_num_reqs(159_277, 262_144, None) == 2048
    assert sglang.max_num_reqs(3_000_000, 8192, None) == 4096
    assert sglang.max_num_reqs(3_000_000, 8192, 64) == 64
    assert sglang.req_to_token_bytes(4096, 131_072, 0) == 4096 * 131_076 * 4


def test_versions_map_to_eras() -> None:
    era = sglang.era_for
    assert (era("0.4.3").pool, era("0.4.3").fraction_rule) == (PoolEra.A, FractionRule.TP_TABLE)
    assert era("0.4.3.post4").fraction_rule is FractionRule.TP_TABLE
    assert (era("0.4.9").pool, era("0.4.9").fraction_rule) == (
        PoolEra.A,
        FractionRule.RESERVE_TABLE,
    )
    assert (era("0.5.2").pool, era("0.5.2").fraction_rule) == (
        PoolEra.B,
        FractionRule.RESERVE_TABLE,
    )
    assert era("v0.5.9").fraction_rule is FractionRule.HEURISTICS
    assert era("0.5.10").fraction_rule is FractionRule.PIECEWISE  # not 0.5.1
    assert era("main").pool is PoolEra.C
    with pytest.raises(KvtierError):
        era("latest")


def test_versions_are_ordered_values() -> None:
    versions = ["main", "0.5.10", "0.4.9", "0.5.9", "v0.4.3.post4", "0.5.2"]
    ordered = sorted(Version.parse(v, "SGLang") for v in versions)
    assert [str(v) for v in ordered] == [
        "v0.4.3.post4",
        "0.4.9",
        "0.5.2",
        "0.5.9",
        "0.5.10",
        "main",
    ]


def _sglang(tp: int, speculative: str | None = None) -> Deployment:
    return Deployment(engine=Engine.SGLANG, model="m", tp=tp, speculative_algorithm=speculative)


def _spec(name: str) -> ModelSpec:
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    return model_from_config(config, name)


QWEN3 = _spec("qwen3-8b")


@pytest.mark.parametrize(
    ("version", "rule"),
    [
        ("0.4.5.post3", FractionRule.TP_TABLE),
        ("0.4.6", FractionRule.CARD_TABLE),
        ("0.4.7.post1", FractionRule.CARD_RESERVE),
        ("0.4.8", FractionRule.RESERVE_TABLE),
        ("0.5.2", FractionRule.RESERVE_TABLE),
        ("0.5.3", FractionRule.HEURISTICS),
        ("0.5.9", FractionRule.HEURISTICS),
        ("0.5.10", FractionRule.PIECEWISE),
        ("0.5.13.post1", FractionRule.PIECEWISE),
        ("0.5.14", FractionRule.MEMORY_HOOK),
        ("main", FractionRule.MEMORY_HOOK),
    ],
)
def test_fraction_rule_boundaries(version: str, rule: FractionRule) -> None:
    assert sglang.era_for(version).fraction_rule is rule


def _default(version: str, gpu: int | None, d: Deployment, model: ModelSpec = QWEN3) -> float:
    return default_mem_fraction(version, gpu, d, model).value


def test_default_fraction_at_each_boundary() -> None:
    tp8 = _sglang(8)
    # v0.4.5: the TP table whatever the card; v0.4.6: above 81,920 MiB, 13 GiB reserved
    assert _default("0.4.5", 143_771, tp8) == 0.81
    assert _default("0.4.6", 81_559, tp8) == 0.81
    assert _default("0.4.6", 143_771, tp8) == (143_771 - 13 * 1024) / 143_771
    # v0.4.7: 0.79 above 180,000 MiB; min(0.88 + 48 GiB x 0.12 / gpu, 1 - 18 GiB / gpu) on H200
    assert _default("0.4.7", 183_359, tp8) == 0.79
    assert _default("0.4.7", 143_771, tp8) == min(
        0.88 + 48 * 1024 * (1 - 0.88) / 143_771, (143_771 - 18 * 1024) / 143_771
    )
    assert _default("0.4.7", 81_559, _sglang(1, "EAGLE")) == 0.88 * 0.95
    # v0.4.8-v0.5.2 reserve table: RTX 5080 16,303 MiB TP1 -> (2.8 + 0.1) GiB -> 0.818 (S09)
    assert _default("0.4.8", 16_303, _sglang(1)) == 0.818
    assert _default("0.5.2", 16_303, _sglang(1)) == 0.818
    # STANDALONE reserves 6 GiB from v0.5.2, 2 GiB before
    h100 = 81_559
    assert _default("0.5.1", h100, _sglang(1, "STANDALONE")) == round((h100 - 12 * 1024) / h100, 3)
    assert _default("0.5.2", h100, _sglang(1, "STANDALONE")) == round((h100 - 16 * 1024) / h100, 3)
    # v0.5.3 heuristics: 512 + 8192 x 1.5 + 256 x 2 + 128 = 13,440 MiB on an H100 at TP1
    assert _default("0.5.3", h100, _sglang(1)) == round((h100 - 13_440) / h100, 3) == 0.835
    # v0.5.10: plus 8 MiB per piecewise CUDA-graph size (58 sizes up to 8192 tokens)
    assert _default("0.5.10", h100, _sglang(1)) == round((h100 - 13_440 - 58 * 8) / h100, 3)
    # and EAGLE's reserve doubles to 4 GiB (piecewise graphs are off with a draft)
    assert _default("0.5.9", 97_887, _sglang(8, "EAGLE3")) == 0.827
    assert _default("0.5.10", 97_887, _sglang(8, "EAGLE3")) == round(
        (97_887 - 14_848 - 4096) / 97_887, 3
    )
    # from v0.5.11 a draft leaves piecewise graphs on: their 58 sizes x 8 MiB count too
    assert _default("0.5.11", 97_887, _sglang(8, "EAGLE3")) == round(
        (97_887 - 14_848 - 58 * 8 - 4096) / 97_887, 3
    )


def test_default_chunk_and_cuda_graph_batch_by_version() -> None:
    def picked(version: str, gpu: int | None, tp: int = 1) -> tuple[int | None, int | None]:
        rule = default_mem_fraction(version, gpu, _sglang(tp), QWEN3)
        return rule.chunked_prefill_size, rule.cuda_graph_max_bs

    assert picked("0.4.5", 24_564) == (2048, 8)
    assert picked("0.4.5", 81_559) == (8192, 160)
    assert picked("0.4.6", 81_559) == (8192, None)  # left to the CUDA-graph runner
    assert picked("0.4.7", 183_359) == (16384, None)
    assert picked("0.4.8", 32_607, 4) == (2048, 80)
    assert picked("0.4.8", None) == (4096, None)
    assert picked("0.5.4", 24_564) == (2048, 16)
    assert picked("0.5.5", 24_564) == (2048, 24)
    assert picked("0.5.9", 46_068, 4) == (4096, 160)
    assert picked("0.5.12", 183_359) == (16384, 512)


def test_vlm_factor_lowers_kimi_k25() -> None:
    """MoonViT, 27 layers of 1,152: 0.95 x (1 - 0.1 x (27 x 1152^2 / (24 x 1024^2) - 1))."""
    kimi = _spec("kimi-k2.5")
    assert (kimi.vision_layers, kimi.vision_hidden_size) == (27, 1152)
    factor = 0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1))
    assert vlm_factor(kimi) == pytest.approx(factor) == pytest.approx(0.9098, abs=1e-4)
    d = _sglang(8)
    # H200 TP8: 512 + 8192 x 1.5 + 512 x 2 + 1024 = 14,848 MiB -> 0.897, then x 0.9098 -> 0.816
    assert _default("0.5.9", 143_771, d, kimi) == pytest.approx(
        round((143_771 - 14_848) / 143_771, 3) * factor
    )
    assert _default("0.4.9", 143_771, d, kimi) == round((143_771 - 16 * 1024) / 143_771, 3) * 0.9
    assert _default("0.4.8", 143_771, d, kimi) == round((143_771 - 16 * 1024) / 143_771, 3)
    # Qwen2.5-VL's vision config has `depth`, not num_hidden_layers: SGLang reads 24 layers
    qwen_vl = _spec("qwen2.5-vl-7b-instruct")
    assert qwen_vl.vision_layers is None
    assert vlm_factor(qwen_vl) == 0.95 * (1 - 0.1 * (1280**2 / 1024**2 - 1))


def test_hicache_ratio_4_on_the_founding_deployment() -> None:
    """159,277 device tokens x 4 + 1 page -> 637,109 host tokens, 44.77 GB per rank."""
    per_token = hicache.host_bytes_per_token(MLA, 8, 61, BF16)
    assert per_token == 70_272
    tokens = hicache.host_tokens(159_277, 1, per_token, 4.0, None)
    assert tokens == 637_109
    assert tokens * per_token / GB == pytest.approx(44.77, abs=0.01)
    check = hicache.check_host_ram(tokens * per_token, 8, int(396 * GB))
    assert check.engine_ok and check.node_ok
    assert check.node_bytes / GB == pytest.approx(358.2, abs=0.1)


def test_hicache_size_is_decimal_gb_per_rank_and_node_check_can_fail() -> None:
    tokens = hicache.host_tokens(10_000, 64, 70_272, None, 50.0)
    assert tokens == (int(50e9 // 70_272) // 64 + 1) * 64
    check = hicache.check_host_ram(90 * GB, 8, int(396 * GB))
    assert check.engine_ok and not check.node_ok
    assert not hicache.check_host_ram(390 * GB, 1, int(396 * GB)).engine_ok


def test_speculative_decoding_caps_running_requests_at_48() -> None:
    era = sglang.era_for("0.5.9")
    assert sglang.speculative_max_running_requests("EAGLE3", era) == 48
    assert sglang.speculative_max_running_requests("NGRAM", era) is None
    assert sglang.speculative_max_running_requests(None, era) is None
    assert sglang.speculative_max_running_requests("EAGLE", sglang.era_for("0.4.3")) is None
