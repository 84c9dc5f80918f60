"""Per-rank weight bytes against what SGLang and vLLM measured right after loading."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import require_shared
from kvtier.errors import KvtierError, UnsupportedModel
from kvtier.model.catalog import catalog_ids, resolve_model
from kvtier.model.dtypes import dtype_bytes
from kvtier.model.params import (
    ATTENTION_KV,
    ATTENTION_KV_FULL,
    EMBEDDING,
    LM_HEAD,
    MLA_ABSORBED,
    ROPE_CACHE,
    ROUTER_FP32,
    VISION_TOWER,
)
from kvtier.model.weights import weight_bytes
from kvtier.units import GiB

# (model, tp, GiB per GPU the engine logged after loading, case id in shared/cases, log text,
#  GiB the log may exceed the estimate by). SGLang: "Load weight end. ... mem usage=X GB";
# vLLM: "Model loading took X GiB memory". Both are the device memory the load consumed: the
# tensors kvtier counts plus what the process allocates beside them (CUDA modules, allocator
# slack): a few MiB in vLLM 0.19 (L05, L16, L11 land within the log's rounding), 0.13-0.19 GiB
# in SGLang for dense models of any size (S04, S08, S09), 0.35 GiB for Kimi-K2.5.
GOLDEN = [
    ("kimi-k2.5", 8, 72.33, "seed-sglang", "mem usage=72.33 GB", 0.4),
    ("llama-3.1-8b", 1, 14.99, "L05", "Model loading took 14.99 GiB", 0.01),
    ("qwen3-8b", 1, 15.27, "L16", "Model loading took 15.27 GiB", 0.01),
    ("deepseek-v2-lite", 1, 29.43, "L19", "Model loading took 29.43 GiB", 0.06),
    ("qwen2.5-7b", 1, 14.25, "V11", "model weights take 14.25GiB", 0.06),
    ("llama-3.3-70b-fp8", 2, 33.88, "L11", "Model loading took 33.88 GiB", 0.01),
    ("qwen3-14b", 4, 7.08, "S08", "mem usage=7.08 GB", 0.2),
    ("qwen3-0.6b", 1, 1.25, "S09", "mem usage=1.25 GB", 0.2),
    # S04 prints no mem usage: avail mem 22.76 GB before loading, 8.37 GB after
    ("deepseek-r1-distill-qwen-7b", 1, 22.76 - 8.37, "S04", "avail mem=8.37 GB", 0.2),
]
_COLUMNS = ("model", "tp", "logged", "case", "line", "slack")


@pytest.mark.parametrize(_COLUMNS, GOLDEN)
def test_weights_match_the_engines(
    model: str, tp: int, logged: float, case: str, line: str, slack: float
) -> None:
    estimate = weight_bytes(resolve_model(model), tp).total_gib
    # never above the log (beyond its 0.01 rounding): every counted tensor is in the figure
    assert -0.005 <= logged - estimate <= slack


@pytest.mark.parametrize(_COLUMNS, GOLDEN)
def test_golden_figures_are_the_logged_ones(
    model: str, tp: int, logged: float, case: str, line: str, slack: float
) -> None:
    cases = require_shared("cases")
    if case == "seed-sglang":
        text = (cases / "seed-sglang.log").read_text()
    else:
        logs = {c["id"]: c["log"] for c in json.loads((cases / "dev-logs.json").read_text())}
        text = logs[case]
    assert line in text


def test_kimi_k25_breakdown_per_rank() -> None:
    w = weight_bytes(resolve_model("kimi-k2.5"), 8)
    groups = {g.name: g for g in w.groups}
    # 60 MoE layers x 384 experts x 3 x 7168 x 2048 int4 weights with a bf16 scale per 32, / 8
    experts = 60 * 384 * 3 * 7168 * 2048 // 8
    assert groups["routed_experts"].params_per_rank == experts
    assert groups["routed_experts"].bytes_per_rank == experts * 9 // 16
    # the fused q_a/kv_a down-projection stays whole: 61 x 7168 x (1536 + 512 + 64) bf16
    assert groups["attention_latent"].bytes_per_rank == 61 * 7168 * 2112 * 2
    assert w.replicated_bytes == sum(g.bytes_per_rank for g in w.groups if not g.sharded)
    assert groups[VISION_TOWER].sharded is False
    assert w.total_bytes == w.sharded_bytes + w.replicated_bytes


def test_vocab_is_padded_to_64_before_sharding() -> None:
    spec = resolve_model("llama-3.1-8b")  # 128,256 = 2,004 x 64: no padding at tp 1
    emb = {g.name: g for g in weight_bytes(spec, 1).groups}[EMBEDDING]
    assert emb.params_per_rank == 128_256 * 4096
    spec = resolve_model("mixtral-8x7b")  # 32,000 -> 32,000 (500 x 64); at tp 8: 4,000 rows
    emb = {g.name: g for g in weight_bytes(spec, 8).groups}[EMBEDDING]
    assert emb.params_per_rank == 4_000 * 4096
    spec = resolve_model("gemma-3-27b")  # 262,208 -> 262,208 (4,097 x 64); tp 2: 131,104 rows
    emb = {g.name: g for g in weight_bytes(spec, 2).groups}[EMBEDDING]
    assert emb.params_per_rank == 131_104 * 5376


def test_kv_projections_replicate_past_the_kv_heads() -> None:
    spec = resolve_model("llama-3.1-405b")  # 8 KV heads
    kv8 = {g.name: g for g in weight_bytes(spec, 8).groups}[ATTENTION_KV]
    kv16 = {g.name: g for g in weight_bytes(spec, 16).groups}[ATTENTION_KV]
    assert kv8.params_per_rank == kv16.params_per_rank


def test_dtype_override_and_refusals() -> None:
    spec = resolve_model("qwen3-8b")
    assert weight_bytes(spec, 1, "float32").total_bytes == 2 * weight_bytes(spec, 1).total_bytes
    assert dtype_bytes("torch.float16") == 2
    with pytest.raises(UnsupportedModel, match="int3"):
        dtype_bytes("int3")
    with pytest.raises(KvtierError, match="does not divide"):
        weight_bytes(spec, 3)
    with pytest.raises(KvtierError, match=">= 1"):
        weight_bytes(spec, 0)


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(catalog_ids()), exp=st.integers(0, 4))
def test_sharding_splits_only_sharded_groups(model: str, exp: int) -> None:
    spec = resolve_model(model)
    tp = 2**exp
    if spec.num_attention_heads % tp:
        return
    quant = spec.quantization
    groups = (*spec.params, *spec.load_buffers)
    for group, share in zip(groups, weight_bytes(spec, tp).groups, strict=True):
        if not group.sharded:
            expected = group.count
        elif group.name == ATTENTION_KV:
            expected = group.count // min(tp, spec.kv.num_kv_heads)
        elif group.name == ATTENTION_KV_FULL:  # Gemma 4's full layers: their own KV heads
            expected = group.count // min(tp, spec.kv.full_kv_heads)
        elif group.name in (EMBEDDING, LM_HEAD):
            padded = math.ceil(spec.vocab_size / 64) * 64
            expected = math.ceil(padded / tp) * spec.hidden_size
        else:
            expected = group.count // tp
        width = quant.bytes_per_param if group.quantized and quant else dtype_bytes(spec.dtype)
        if group.name == ROUTER_FP32:
            width = 4  # GLM-4.x's router, float32 in both engines
        assert share.params_per_rank == expected
        assert share.bytes_per_rank == round(expected * width)


def test_total_gib_is_in_gib() -> None:
    w = weight_bytes(resolve_model("qwen3-8b"), 1)
    assert w.total_gib == w.total_bytes / GiB


def test_load_buffers() -> None:
    def buffers(model: str, tp: int = 1) -> dict[str, int]:
        w = weight_bytes(resolve_model(model), tp)
        return {g.name: g.params_per_rank for g in w.groups if g.buffer}

    # RoPE cos/sin cache: [positions, rotary_dim], one per model
    assert buffers("llama-3.1-8b") == {ROPE_CACHE: 131_072 * 128}  # llama3 scaling: as configured
    assert buffers("kimi-k2.5", 8) == {
        ROPE_CACHE: 4_096 * 64 * 64,  # YaRN: original length x factor, over the rope dims only
        MLA_ABSORBED: 61 * 512 * (64 // 8) * (128 + 128),  # kv_b_proj again, split by head
    }
    assert buffers("gemma-3-27b") == {ROPE_CACHE: (131_072 * 8 + 131_072) * 128}  # global + local
    w = weight_bytes(resolve_model("llama-3.1-8b"), 1)
    assert w.total_bytes - w.param_bytes == 131_072 * 128 * 2


def test_unknown_rope_scaling_is_refused() -> None:
    from kvtier.model.catalog import catalog_entry
    from kvtier.model.config import model_from_config

    entry = catalog_entry("qwen3-8b")
    assert entry is not None
    config = entry.config | {"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}
    with pytest.raises(UnsupportedModel, match="rope_scaling type 'longrope'"):
        model_from_config(config, "q")
