"""Whole ledgers: items divide the card; drafts and hybrid layouts follow the engine; JSON."""

from __future__ import annotations

import dataclasses

import pytest

from founding_support import kimi
from kvtier.engines.deployment import Deployment, Engine, FreeMemory, HiCache, Measured, Profile
from kvtier.engines.vllm import pool as vllm
from kvtier.ledger.plan import plan
from kvtier.payload import to_json
from kvtier.report.plan_payload import plan_payload
from kvtier.units import GiB


def test_vllm_items_divide_the_device_total() -> None:
    ledger = plan(
        Deployment(Engine.VLLM, "Qwen/Qwen3-8B", gpu="H100", mem_fraction=0.9, context_length=32768)
    )
    total = ledger.figures.total_gib
    assert sum(i.gib for i in ledger.items) == pytest.approx(total)
    assert ledger.kv_tokens_range is not None
    assert ledger.kv_tokens_range[0] <= ledger.kv_tokens <= ledger.kv_tokens_range[1]


def test_sglang_items_divide_the_card() -> None:
    ledger = plan(Deployment(Engine.SGLANG, "Qwen/Qwen3-32B", tp=2, gpu="H100"))
    assert sum(i.gib for i in ledger.items) == pytest.approx(81_559 / 1024)


def test_vllm_hybrid_groups_follow_the_layer_counts() -> None:
    """Gemma-3 (10 full, 52 sliding): groups of 10, 8 padding layers; gpt-oss (18/18): 18."""
    assert vllm.hybrid_layout(10, 52) == vllm.HybridLayout(10, 1, 6, 8)
    assert vllm.hybrid_layout(18, 18) == vllm.HybridLayout(18, 1, 1, 0)
    assert vllm.hybrid_layout(20, 28) == vllm.HybridLayout(28, 1, 1, 8)
    layout = vllm.HybridLayout(10, 1, 6, 8)
    # full group: 2048 blocks; each sliding group: cdiv(min(1023 + 8192, 32768), 16) + 1 = 577
    assert vllm.hybrid_blocks_per_request(layout, 32768, 16, 1024, 8192) == 2048 + 6 * 577


def test_vllm_hybrid_reports_concurrency_times_max_model_len() -> None:
    measured = Measured(profile=Profile(activation_gib=2.0, non_torch_gib=0.25),
                        weights_gib=51.4, cuda_graph_gib=1.0, gpu_mem_gib=79.19)  # fmt: skip
    gemma = Deployment(Engine.VLLM, "google/gemma-3-27b-it", gpu="H100", context_length=32768)
    ledger = plan(dataclasses.replace(gemma, measured=measured))
    blocks = ledger.figures.num_blocks
    per_request = 2048 + 6 * 577
    assert ledger.kv_tokens == int(blocks / per_request * 32768)
    pool = ledger.item("KV cache pool").gib
    assert pool == pytest.approx(blocks * 16 * 16 * 256 * 2 * 10 / GiB)


def test_mtp_draft_uses_the_target_layer_and_v0_5_14_prices_it_in() -> None:
    """DeepSeek-V3 NEXTN: one MTP layer of 1,152 B/token; up to v0.5.13 the draft's pool comes
    out of the reserve, from v0.5.14 DefaultPoolConfigurator multiplies the cell by
    (1 + 1/61) (pool_configurator.py; v0.5.13's prices only a DFLASH draft)."""

    def ledger(version: str):
        return plan(
            Deployment(
                Engine.SGLANG,
                "deepseek-ai/DeepSeek-V3",
                tp=8,
                gpu="H200",
                engine_version=version,
                mem_fraction=0.88,
                speculative_algorithm="NEXTN",
            )
        )

    era_b, era_c = ledger("0.5.9"), ledger("main")
    assert era_b.figures.draft_cell_bytes == 1152
    assert era_c.figures.cell_bytes == int(70_272 * (1 + 1 / 61))
    assert ledger("0.5.14").figures.cell_bytes == era_c.figures.cell_bytes
    assert ledger("0.5.13").figures.cell_bytes == 70_272  # Era C pool, draft from the reserve
    assert era_b.figures.rest_gib == era_c.figures.rest_gib
    assert era_c.kv_tokens == pytest.approx(era_b.kv_tokens * 61 / 62, rel=1e-4)
    draft = era_b.item("draft KV pool")
    assert draft.exact is False  # the budget itself is estimated here
    assert draft.gib == pytest.approx((era_b.kv_tokens + 1) * 1152 / GiB)


def test_eagle_draft_from_the_catalog_is_exact() -> None:
    ledger = plan(
        Deployment(
            Engine.SGLANG, "meta-llama/Llama-3.1-70B-Instruct", tp=4, gpu="H100", mem_fraction=0.85,
            speculative_algorithm="EAGLE", draft_model="meta-llama/Llama-3.1-8B-Instruct",
            measured=Measured(free=FreeMemory(before_load_gib=78.5, after_load_gib=45.0)),
        )
    )  # fmt: skip
    # draft: 32 layers x 2 heads per rank x 256 x 2 B
    assert ledger.figures.draft_cell_bytes == 32 * 2 * 256 * 2
    assert ledger.item("draft KV pool").exact
    assert ledger.item("draft weights").gib > 3.0


def test_hicache_pool_in_the_ledger() -> None:
    ledger = plan(
        kimi(
            Measured(free=FreeMemory(before_load_gib=94.04, after_load_gib=21.71)),
            hicache=HiCache(enable=True, ratio=4.0),
        )
    )
    assert ledger.host_pool is not None
    assert ledger.host_pool.tokens == ledger.kv_tokens * 4 + 1
    assert ledger.host_pool.bytes_per_node == 8 * ledger.host_pool.bytes_per_rank


def test_json_contract() -> None:
    ledger = plan(Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", gpu="RTX 4090"))
    data = to_json(plan_payload(ledger))
    keys = ("engine", "model", "kv_tokens", "kv_tokens_range", "kv_bytes_per_token", "ledger")
    for key in (*keys, "concurrency", "inputs"):
        assert key in data
    assert all(set(row) == {"item", "gib", "source", "exact"} for row in data["ledger"])
    assert data["kv_tokens_range"][0] <= data["kv_tokens"] <= data["kv_tokens_range"][1]


def test_vllm_cpu_offload_pool() -> None:
    """100 GiB over TP2 for Qwen3-32B: blocks of 16 x 4 heads x 256 x 2 B x 64 layers x 2 ranks."""
    qwen = Deployment(Engine.VLLM, "Qwen/Qwen3-32B", tp=2, gpu="H100", context_length=32768)
    ledger = plan(dataclasses.replace(qwen, kv_offloading_size_gib=100.0))
    assert ledger.host_pool is not None
    assert ledger.host_pool.tokens == 100 * GiB // (16 * 4 * 256 * 2 * 64 * 2) * 16
    assert ledger.host_pool.bytes_per_rank == 50 * GiB


def test_multimodal_budget_keeps_the_embedding_cache_from_v0_5_18() -> None:
    """Kimi-K2.5 (multimodal) with the founding log's figures: from v0.5.18 the budget gives up
    SGLANG_VLM_CACHE_SIZE_MB = 100 MiB (mm_runtime_reservation_gb) before dividing by the cell."""
    figures = Measured(free=FreeMemory(before_load_gib=94.04, after_load_gib=21.71))
    before = plan(kimi(figures, engine_version="0.5.17"))
    after = plan(kimi(figures, engine_version="0.5.18"))
    cell = after.figures.cell_bytes
    assert before.figures.cell_bytes == cell
    assert after.figures.rest_gib == pytest.approx(before.figures.rest_gib - 100 / 1024)
    assert before.kv_tokens - after.kv_tokens in (100 * 2**20 // cell, 100 * 2**20 // cell + 1)
    text_only = plan(
        Deployment(
            Engine.SGLANG, "Qwen/Qwen3-8B", gpu="H100", engine_version="0.5.18", mem_fraction=0.8,
            measured=Measured(free=FreeMemory(before_load_gib=78.5, after_load_gib=63.0)),
        )
    )  # fmt: skip
    assert text_only.figures.rest_gib == pytest.approx(63.0 - 78.5 * 0.2)
