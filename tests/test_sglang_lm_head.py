"""The LM head under --enable-dp-lm-head: over the attention-TP group (tp / dp) where the model
file passes `use_attn_tp_group=enable_dp_lm_head` to its ParallelLMHead in that release, else
over the full TP (engines/sglang/lm_head.py). At --tp 8 --dp 2: 4 ranks, or 8."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.launch import read_launch
from kvtier.engines.log_geometry import STAND_IN_ARCHITECTURE
from kvtier.engines.sglang.lm_head import HEAD_FILES, lm_head_ranks
from kvtier.errors import KvtierError
from kvtier.ledger.plan import resolve
from kvtier.model.catalog import resolve_model
from kvtier.model.config import TEXT_ARCHITECTURES, WRAPPER_ARCHITECTURES

BASE = Deployment(Engine.SGLANG, "deepseek-v3", tp=8, dp=2, enable_dp_attention=True)


def _deployment(model: str, version: str, dp: int = 2, flag: bool = True) -> Deployment:
    return dataclasses.replace(
        BASE, model=model, dp=dp, enable_dp_attention=dp > 1, enable_dp_lm_head=flag
    ).with_values("test", engine_version=version)


def _ranks(model: str, version: str, dp: int = 2, flag: bool = True) -> int:
    found = lm_head_ranks(resolve_model(model), _deployment(model, version, dp, flag))
    return 8 if found is None else found[0]


@pytest.mark.parametrize(
    ("model", "version", "ranks"),
    [
        ("deepseek-v3", "0.4.6", 8),
        ("deepseek-v3", "0.4.7", 4),
        ("kimi-k2.5", "0.5.23", 4),
        ("qwen3-235b-a22b", "0.4.6", 8),
        ("qwen3-235b-a22b", "0.4.7", 4),
        ("llama-3.1-70b", "0.4.6", 8),
        ("llama-3.1-70b", "0.4.7", 4),
        ("llama-4-scout", "0.5.9", 4),
        ("qwen3-32b", "0.5.7", 8),
        ("qwen3-32b", "0.5.8", 4),
        ("qwen3.5-397b-a17b", "0.5.9", 4),
        ("glm-4.7", "0.5.3", 4),
        ("gpt-oss-120b", "0.5.9", 4),
        ("qwen2.5-72b", "0.5.23", 8),
        ("minimax-m2.5", "0.5.23", 8),
        ("mixtral-8x7b", "0.5.23", 8),
    ],
)
def test_the_lm_head_follows_the_flag_where_the_model_file_does(
    model: str, version: str, ranks: int
) -> None:
    assert _ranks(model, version) == ranks


def test_without_the_flag_or_dp_attention_the_lm_head_is_over_tp() -> None:
    assert _ranks("deepseek-v3", "0.5.23", flag=False) == 8
    assert _ranks("deepseek-v3", "0.5.23", dp=1) == 8  # SGLang turns the flag off at dp 1


def test_every_architecture_kvtier_sizes_has_its_head_file() -> None:
    assert set(TEXT_ARCHITECTURES) | set(WRAPPER_ARCHITECTURES) <= set(HEAD_FILES)


def test_the_launch_flag_sets_the_field() -> None:
    words = "python -m sglang.launch_server --tp 8 --dp 2 --enable-dp-attention --enable-dp-lm-head"
    assert read_launch([words]).values["enable_dp_lm_head"] is True


def test_the_plans_weights_lose_the_heads_share_beyond_attention_tp() -> None:
    # DeepSeek-V3's head: 129,280 x 7,168 bf16; over 4 ranks instead of 8
    head = 129_280 * 7_168 * 2
    on, off = (resolve(_deployment("deepseek-v3", "0.5.23", flag=f)) for f in (True, False))
    assert on.weights_bytes is not None and off.weights_bytes is not None
    assert on.weights_bytes - off.weights_bytes == head // 4 - head // 8
    assert "the LM head at attention TP4 (--enable-dp-lm-head" in on.weights_source


SERVER_ARGS = (
    "[2025-10-07 23:10:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', "
    "tp_size=8, dp_size=2, enable_dp_attention=True, enable_dp_lm_head={flag})\n"
    "[2025-10-07 23:17:19 DP0 TP0] KV Cache is allocated. #tokens: 575424, KV size: 43.67 GB\n"
)


@pytest.mark.parametrize("flag", [True, False])
def test_explain_reads_the_flag_from_the_logged_server_args(
    flag: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "start.log"
    log.write_text(SERVER_ARGS.format(flag=flag))
    argv = ["explain", str(log), "--gpu", "H200", "--sglang-version", "0.5.23", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert ("the LM head at attention TP4 (--enable-dp-lm-head" in out) is flag


def test_an_architecture_whose_file_is_not_read_is_refused_under_the_flag() -> None:
    """Its head was taken over the full TP, a guess; the refusal names the architecture."""
    model = dataclasses.replace(resolve_model("llama-3.1-70b"), architecture="Qwen2MoeForCausalLM")
    with pytest.raises(KvtierError) as refused:
        lm_head_ranks(model, _deployment("llama-3.1-70b", "0.5.23"))
    assert str(refused.value) == (
        "Qwen2MoeForCausalLM (meta-llama/Llama-3.1-70B-Instruct): kvtier has not read which "
        "ranks SGLang's model file splits its LM head over under --enable-dp-lm-head (full TP8 "
        "or attention TP4); drop --enable-dp-lm-head"
    )
    assert lm_head_ranks(model, _deployment("llama-3.1-70b", "0.5.23", flag=False)) is None


def test_explains_stand_in_model_has_no_lm_head_split() -> None:
    """A log's unknown model (its KV geometry from the log) has no weights to split."""
    model = dataclasses.replace(resolve_model("llama-3.1-70b"), architecture=STAND_IN_ARCHITECTURE)
    assert lm_head_ranks(model, _deployment("llama-3.1-70b", "0.5.23")) is None
