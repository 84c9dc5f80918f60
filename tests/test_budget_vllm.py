"""vLLM rules: page bytes, the available-memory formula per era, refusals, manual KV size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.engines.deployment import Deployment, Engine, Measured
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.vllm import pool as vllm
from kvtier.errors import KvtierError
from kvtier.ledger.plan import plan
from kvtier.spec.model import AttentionKind, KVGeometry, LayerKind
from kvtier.units import GiB

BF16 = KVDtype("bfloat16", 2)
MLA = KVGeometry(
    AttentionKind.MLA, 1, 576, 0, (LayerKind.FULL,) * 27, kv_lora_rank=512, qk_rope_head_dim=64
)
LLAMA_8B = KVGeometry(AttentionKind.MHA, 8, 128, 128, (LayerKind.FULL,) * 32)


def test_page_bytes() -> None:
    assert vllm.page_bytes(LLAMA_8B, 1, 16, BF16) == 16 * 8 * 256 * 2
    assert vllm.page_bytes(LLAMA_8B, 2, 16, BF16) == 16 * 4 * 256 * 2
    assert vllm.page_bytes(MLA, 8, 16, BF16) == 16 * 576 * 2  # one latent head, not TP-split
    ds = resolve_kv_dtype(Engine.VLLM, "fp8_ds_mla", "bfloat16")
    assert vllm.page_bytes(MLA, 1, 64, ds) == 64 * 656
    with pytest.raises(KvtierError, match="MLA"):
        vllm.page_bytes(LLAMA_8B, 1, 16, ds)


def test_unknown_kv_dtype_lists_the_choices() -> None:
    with pytest.raises(KvtierError, match="fp8_e4m3"):
        resolve_kv_dtype(Engine.VLLM, "int3", "bfloat16")


@given(st.integers(0, 200 * GiB), st.sampled_from([16, 32, 64]), st.integers(1, 126))
def test_blocks_fit_in_the_budget(available: int, block: int, layers: int) -> None:
    page = vllm.page_bytes(LLAMA_8B, 1, block, BF16)
    blocks = vllm.num_blocks(available, page, layers)
    assert blocks * page * layers <= available < (blocks + 1) * page * layers


def test_versions_map_to_eras() -> None:
    assert vllm.era_for("0.6.6").worker is vllm.Worker.V0
    assert vllm.era_for("0.10.1.dev101+g1").worker is vllm.Worker.V1_MID
    assert vllm.era_for("0.19.0").worker is vllm.Worker.V1_MID
    assert not vllm.era_for("0.20.2").budgets_cuda_graphs
    assert vllm.era_for("0.21.0").budgets_cuda_graphs
    assert vllm.era_for(None).budgets_cuda_graphs


def llama(**kw: object) -> Deployment:
    base: dict = {
        "engine": Engine.VLLM,
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "mem_fraction": 0.95,
        "context_length": 8192,
        "engine_version": "0.21.0",
        "measured": Measured(
            gpu_mem_gib=79.19,
            weights_gib=14.99,
            activation_gib=1.89,
            non_torch_gib=0.25,
            cuda_graph_gib=0.84,
        ),
    }
    base.update(kw)
    return Deployment(**base)


def test_cuda_graph_estimate_is_budgeted_from_v0_21() -> None:
    """The L05 deployment on >= v0.21 loses the 0.84 GiB graph estimate: 0.84 GiB / 2 MiB blocks."""
    old = plan(llama(engine_version="0.19.0"))
    new = plan(llama())
    assert old.kv_tokens - new.kv_tokens == pytest.approx(0.84 * 1024 / 2 * 16, abs=32)
    assert new.item("CUDA graphs (budgeted estimate)").gib == 0.84


def test_kv_cache_memory_bytes_ignores_utilization() -> None:
    ledger = plan(llama(kv_cache_memory_bytes=10 * GiB, mem_fraction=0.5))
    assert ledger.kv_tokens == 10 * GiB // (2 * 1024 * 1024) * 16


def test_no_memory_for_blocks_is_refused_as_the_engine_does() -> None:
    with pytest.raises(KvtierError, match="No available memory for the cache blocks"):
        plan(llama(mem_fraction=0.2))


def test_context_longer_than_the_pool_is_refused_with_the_fitting_length() -> None:
    with pytest.raises(KvtierError, match="estimated maximum model length is"):
        plan(llama(mem_fraction=0.235, context_length=131072))


def test_mtp_draft_layers_share_the_pool() -> None:
    """deepseek_mtp adds the checkpoint's MTP layer to the pool: 61 -> 62 layers per block."""

    def tokens(**kw: object) -> int:
        return plan(
            Deployment(
                Engine.VLLM,
                "deepseek-ai/DeepSeek-V3",
                tp=8,
                gpu="H200",
                kv_cache_memory_bytes=40 * GiB,
                **kw,
            )
        ).kv_tokens

    assert tokens() == 40 * GiB // (16 * 576 * 2 * 61) * 16
    assert tokens(speculative_algorithm="DEEPSEEK_MTP") == 40 * GiB // (16 * 576 * 2 * 62) * 16
    eagle = plan(
        Deployment(
            Engine.VLLM,
            "Qwen/Qwen3-8B",
            gpu="H100",
            context_length=8192,
            speculative_algorithm="EAGLE3",
        )
    )
    assert any("upper bound" in n for n in eagle.notes)
