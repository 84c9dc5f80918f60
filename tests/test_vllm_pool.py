"""vLLM rules: page bytes, the available-memory formula per era, refusals, manual KV size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.engines.deployment import Deployment, Engine, Measured, Profile
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.vllm import pool as vllm
from kvtier.errors import KvtierError
from kvtier.ledger.plan import plan
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind
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
    assert vllm.era_for("0.19.1").worker is vllm.Worker.V1_MID
    assert not vllm.era_for("0.19.1").budgets_cuda_graphs
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 in the v0.20.0 wheel
    assert vllm.era_for("0.20.0").worker is vllm.Worker.V1_GRAPHS
    assert vllm.era_for("0.20.2").budgets_cuda_graphs
    assert not vllm.era_for("0.20.2").logs_concurrency_tokens
    assert vllm.era_for("0.21.0").logs_concurrency_tokens
    assert vllm.era_for(None).budgets_cuda_graphs
    assert vllm.Worker.V1_MID < vllm.Worker.V1_GRAPHS < vllm.Worker.V1


def test_logged_token_count_changes_at_v0_21() -> None:
    """Figures vLLM's own _report_kv_cache_config printed (tests/oracle_vllm): 3 full + 15
    sliding-window layers (6 groups of 3), 50,862 blocks, 11,077 blocks per 131,072-token request;
    and 8 full layers, 19,073 blocks at max_model_len 100 (7 blocks a request)."""
    v20, v21 = vllm.era_for("0.20.2"), vllm.era_for("0.21.0")
    assert vllm.logged_tokens(v20, 50862, 6, 16, 11077, 131072) == 135_632
    assert vllm.logged_tokens(v21, 50862, 6, 16, 11077, 131072) == 601_840
    assert vllm.logged_tokens(v20, 19073, 1, 16, 7, 100) == 305_168
    assert vllm.logged_tokens(v21, 19073, 1, 16, 7, 100) == 272_471


def test_gemma3_logged_tokens_by_version() -> None:
    """gemma-3-27b at 131,072 context: the v0.20 line counts every group's blocks, the v0.21 line
    the sliding-window groups' bounded share (several times larger)."""

    def tokens(version: str) -> int:
        return plan(
            Deployment(
                Engine.VLLM,
                "google/gemma-3-27b-it",
                gpu="H100",
                engine_version=version,
                kv_cache_memory_bytes=20 * GiB,
            )
        ).kv_tokens

    old, new = tokens("0.20.0"), tokens("0.21.0")
    assert 1.9 < new / old < 5


def test_batch_defaults_by_gpu() -> None:
    """get_batch_defaults: 8192 tokens on >= 70 GiB devices other than A100, else 2048."""
    assert vllm.default_max_num_batched_tokens(79.19, "H100 SXM") == 8192
    assert vllm.default_max_num_batched_tokens(79.25, "A100 80GB") == 2048
    assert vllm.default_max_num_batched_tokens(44.39, "L40S") == 2048
    assert vllm.default_max_num_batched_tokens(None, "") == 8192
    ledger = plan(
        Deployment(Engine.VLLM, "google/gemma-3-27b-it", gpu="L40S", tp=4, context_length=32768)
    )
    assert any(i.name == "max_num_batched_tokens" and i.value == "2048" for i in ledger.inputs)


def test_model_dtype_by_gpu() -> None:
    """_get_and_verify_dtype / _resolve_auto_dtype with CudaPlatform.supported_dtypes."""
    assert vllm.model_dtype("auto", "float32", None, (8, 0)) == "bfloat16"
    assert vllm.model_dtype("auto", "float32", None, (7, 5)) == "float16"
    assert vllm.model_dtype("auto", "float32", "gemma2", (7, 5)) == "float32"
    assert vllm.model_dtype("auto", "bfloat16", None, (7, 0)) == "float16"
    assert vllm.model_dtype("auto", "float16", None, (9, 0)) == "float16"
    assert vllm.model_dtype("float32", "bfloat16", None, (9, 0)) == "float32"
    assert vllm.model_dtype("half", "bfloat16", None, (9, 0)) == "float16"
    assert vllm.model_dtype("FLOAT", "bfloat16", None, None) == "float32"
    with pytest.raises(KvtierError, match="does not support float16"):
        vllm.model_dtype("float16", "bfloat16", "gemma3", (9, 0))
    with pytest.raises(KvtierError, match=r"compute capability of at least 8\.0"):
        vllm.model_dtype("bfloat16", "bfloat16", None, (7, 5))
    with pytest.raises(KvtierError, match="Unknown dtype"):
        vllm.model_dtype("fp8", "bfloat16", None, (9, 0))


def test_explicit_float32_doubles_the_kv_page() -> None:
    base = llama(kv_cache_memory_bytes=10 * GiB)
    fp32 = plan(llama(kv_cache_memory_bytes=10 * GiB, dtype="float32"))
    assert plan(base).kv_tokens == 2 * fp32.kv_tokens
    with pytest.raises(KvtierError, match="does not support float16"):
        plan(
            Deployment(
                Engine.VLLM,
                "google/gemma-2-9b-it",
                gpu="H100",
                dtype="float16",
                context_length=8192,
            )
        )


def test_llama4_chunked_attention_is_full_attention_kv() -> None:
    """attention_chunk_size with VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 turns the
    hybrid KV cache manager off: all 48 layers, one group."""
    ledger = plan(
        Deployment(
            Engine.VLLM,
            "meta-llama/Llama-4-Scout-17B-16E-Instruct",
            gpu="H200",
            tp=8,
            context_length=65536,
            kv_cache_memory_bytes=30 * GiB,
            engine_version="0.20.0",
            allow_chunked_local_hma=False,
        )
    )
    page = 16 * 1 * 256 * 2  # 8 KV heads over TP8, head_dim 128 for K and V
    assert ledger.kv_tokens == 30 * GiB // (page * 48) * 16
    assert any("chunked local attention" in n for n in ledger.notes)


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
            profile=Profile(activation_gib=1.89, non_torch_gib=0.25),
            cuda_graph_gib=0.84,
        ),
    }
    base.update(kw)
    return Deployment(**base)


def test_cuda_graph_estimate_is_budgeted_from_v0_20() -> None:
    """The L05 deployment on >= v0.20 loses the 0.84 GiB graph estimate: 0.84 GiB / 2 MiB blocks."""
    old = plan(llama(engine_version="0.19.1"))
    new = plan(llama(engine_version="0.20.0"))
    assert plan(llama()).kv_tokens == new.kv_tokens
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
