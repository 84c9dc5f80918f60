"""The ranks SGLang splits the attention projections over under --enable-dp-attention, by model
file and release (engines/sglang/attention.py): the attention-TP group (tp / dp) where the file
passes it to QKVParallelLinear / RowParallelLinear, else the full TP; the KV pool's heads per rank
stay at tp / dp either way (the model runner's get_num_kv_heads(get_attention_tp_size())).
At --tp 8 --dp 2: 4 ranks, or 8."""

from __future__ import annotations

import dataclasses

import pytest

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.log_geometry import STAND_IN_ARCHITECTURE
from kvtier.engines.sglang.attention import ATTENTION_FILES, attention_ranks
from kvtier.errors import KvtierError
from kvtier.ledger.plan import build_ledger, resolve
from kvtier.model.catalog import resolve_model
from kvtier.model.config import TEXT_ARCHITECTURES, WRAPPER_ARCHITECTURES
from kvtier.model.params import ATTENTION, ATTENTION_KV
from kvtier.model.weights import Splits, weight_bytes

BASE = Deployment(Engine.SGLANG, "llama-3.1-70b", gpu="H200", tp=8, dp=2, enable_dp_attention=True)


def _deployment(model: str, version: str, dp: int = 2) -> Deployment:
    return dataclasses.replace(BASE, model=model, dp=dp, enable_dp_attention=dp > 1).with_values(
        "test", engine_version=version
    )


def _ranks(model: str, version: str, dp: int = 2) -> int:
    found = attention_ranks(resolve_model(model), _deployment(model, version, dp))
    return 8 if found is None else found[0]


# (model, the last release at full TP, the first at attention TP); None: no such release
FILES = [
    ("deepseek-v3", None, "0.4.6"),  # deepseek_v2.py: every release
    ("kimi-k2.5", None, "0.5.23"),
    ("glm-5", None, "0.5.23"),
    ("llama-4-scout", None, "0.5.23"),  # llama4.py
    ("qwen3-235b-a22b", "0.4.6", "0.4.7"),  # qwen3_moe.py
    ("qwen3-vl-235b-a22b", None, "0.5.9"),  # qwen3_vl_moe.py's Qwen3MoeModel
    ("qwen3-32b", "0.4.8", "0.4.9"),  # qwen3.py
    ("glm-4.7", None, "0.5.3"),  # glm4_moe.py, glm4_moe_lite.py, gpt_oss.py, qwen3_next.py,
    ("glm-4.7-flash", None, "0.5.8"),  # qwen3_5.py: every release that has them
    ("gpt-oss-120b", None, "0.5.3"),
    ("qwen3-next-80b-a3b", None, "0.5.3"),
    ("qwen3.5-397b-a17b", None, "0.5.9"),
    ("minimax-m2.5", "0.5.10", "0.5.11"),  # minimax_m2.py
    ("llama-3.1-70b", "0.5.23", None),  # llama.py, qwen2.py, mixtral.py, gemma*: every release
    ("qwen2.5-72b", "0.5.23", None),
    ("mixtral-8x7b", "0.5.23", None),
    ("gemma-3-27b", "0.5.23", None),
]


@pytest.mark.parametrize(("model", "full_tp", "attn_tp"), FILES)
def test_the_attention_split_follows_the_model_file_and_release(
    model: str, full_tp: str | None, attn_tp: str | None
) -> None:
    if full_tp is not None:
        assert _ranks(model, full_tp) == 8
    if attn_tp is not None:
        assert _ranks(model, attn_tp) == 4


def test_without_dp_attention_the_attention_is_over_tp() -> None:
    assert (
        attention_ranks(resolve_model("qwen3-32b"), _deployment("qwen3-32b", "0.5.23", 1)) is None
    )


def test_every_architecture_kvtier_sizes_has_its_attention_file() -> None:
    assert set(TEXT_ARCHITECTURES) | set(WRAPPER_ARCHITECTURES) <= set(ATTENTION_FILES)


def test_a_full_tp_file_keeps_full_tp_attention_weights_and_the_pool_at_attention_tp() -> None:
    # Llama-3.1-70B: 80 layers of q/o (2 x 8,192 x 8,192) and k/v (2 x 1,024 x 8,192), bf16
    spec = resolve_model("llama-3.1-70b")
    q_o, k_v = 80 * 2 * 8192 * 8192 * 2, 80 * 2 * 1024 * 8192 * 2
    plan = resolve(_deployment("llama-3.1-70b", "0.5.23"))
    assert plan.weights_bytes == weight_bytes(spec, 8).total_bytes
    four = weight_bytes(spec, 8, splits=Splits(attention=4)).total_bytes
    assert four - weight_bytes(spec, 8).total_bytes == (q_o + k_v) // 4 - (q_o + k_v) // 8
    assert "attention at TP8 (llama.py builds it at full TP under DP attention)" in (
        plan.weights_source
    )
    # the pool: 8 KV heads over attention TP4, 2 a rank, 80 layers x 128 x 2 (K, V) x 2 B
    assert build_ledger(plan).kv_bytes_per_token == 80 * 2 * 128 * 2 * 2


def test_a_file_that_takes_attention_tp_splits_its_weights_over_it() -> None:
    spec = resolve_model("qwen3-32b")
    plan = resolve(_deployment("qwen3-32b", "0.5.23"))
    four = weight_bytes(spec, 8, splits=Splits(attention=4))
    groups = {g.name: g.params_per_rank for g in four.groups}
    full = {g.name: g.params_per_rank for g in weight_bytes(spec, 8).groups}
    assert groups[ATTENTION] == 2 * full[ATTENTION]
    assert groups[ATTENTION_KV] == 2 * full[ATTENTION_KV]
    assert "attention at TP4 (DP attention; qwen3.py from v0.4.9)" in plan.weights_source
    old = resolve(_deployment("qwen3-32b", "0.4.8"))
    assert "attention at TP8 (qwen3.py takes attention TP from v0.4.9)" in old.weights_source


def test_an_architecture_whose_file_is_not_read_is_refused_under_dp_attention() -> None:
    """Its attention was taken at tp / dp, a guess; the refusal names the architecture."""
    model = dataclasses.replace(resolve_model("llama-3.1-70b"), architecture="Qwen2MoeForCausalLM")
    d = _deployment("llama-3.1-70b", "0.5.23")
    with pytest.raises(KvtierError) as refused:
        attention_ranks(model, d)
    assert str(refused.value).startswith(
        "Qwen2MoeForCausalLM (meta-llama/Llama-3.1-70B-Instruct): kvtier has not read which "
        "ranks SGLang's model file splits its attention over under --enable-dp-attention "
        "(full TP8 or attention TP4)"
    )
    assert attention_ranks(model, _deployment("llama-3.1-70b", "0.5.23", dp=1)) is None


def test_explains_stand_in_model_has_no_attention_split() -> None:
    """A log's unknown model (its KV geometry from the log) has no weights to split."""
    model = dataclasses.replace(resolve_model("llama-3.1-70b"), architecture=STAND_IN_ARCHITECTURE)
    assert attention_ranks(model, _deployment("llama-3.1-70b", "0.5.23")) is None
