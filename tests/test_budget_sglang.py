"""SGLang pool rules: cell sizes, the budget formula, page rounding, defaults, HiCache sizing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.sglang import hicache
from kvtier.engines.sglang import pool as sglang
from kvtier.engines.sglang.defaults import default_mem_fraction
from kvtier.engines.sglang.pool import FractionRule, PoolEra
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.spec.model import AttentionKind, KVGeometry, LayerKind
from kvtier.units import GB, GiB

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


def test_chunked_attention_refused() -> None:
    kv = KVGeometry(AttentionKind.MHA, 8, 128, 128, (LayerKind.CHUNKED, LayerKind.FULL))
    with pytest.raises(KvtierError, match="chunked"):
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
    assert era("0.5.10").fraction_rule is FractionRule.HEURISTICS  # not 0.5.1
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


def test_default_fraction_rules() -> None:
    # v0.5.4+ heuristics, RTX PRO 6000 (97,887 MiB), TP8, EAGLE3: 512 + 8192x1.5 + 512x2 + 1024
    # = 14,848 MiB, + 2,048 for speculative decoding -> round((97887 - 16896) / 97887, 3)
    rule = default_mem_fraction(FractionRule.HEURISTICS, 97_887, _sglang(8, "EAGLE3"))
    assert rule.value == 0.827
    assert (rule.chunked_prefill_size, rule.cuda_graph_max_bs) == (8192, 512)
    # main-2026 worked example: H100 81,559 MiB, TP1 -> 13,440 MiB reserved -> 0.835
    assert default_mem_fraction(FractionRule.MEMORY_HOOK, 81_559, _sglang(1)).value == 0.835
    assert default_mem_fraction(FractionRule.RESERVE_TABLE, 16_303, _sglang(1)).value == 0.818
    assert default_mem_fraction(FractionRule.TP_TABLE, None, _sglang(8)).value == 0.81


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
