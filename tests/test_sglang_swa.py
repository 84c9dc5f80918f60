"""SGLang's hybrid sliding-window pools: which releases give which model one, and the split.

Facts read in the released wheels (python/sglang/srt/): configs/model_config.py
is_hybrid_swa_model (v0.5.8+: Llama4ForConditionalGeneration, GptOssForCausalLM; no Gemma 2/3),
model_executor/model_runner.py (v0.4.10-v0.5.6: any sliding-window model but Llama 4; Gemma 2/3
off from v0.5.1), v0.5.7 (is_hybrid_model: MiMo-V2 or --hybrid-kvcache-ratio only), and
pool_configurator.py HybridSWAPoolConfigurator (v0.5.11+).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.cli import main
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.sglang import pool as sglang
from kvtier.engines.sglang import swa
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.config import model_from_config
from kvtier.model.description import ModelSpec
from kvtier.units import GiB

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
BF16 = KVDtype("bfloat16", 2)


def _spec(name: str) -> ModelSpec:
    return model_from_config(json.loads((CONFIGS / f"{name}.json").read_text()), name)


SCOUT, GPT_OSS, GEMMA3, GEMMA2 = (
    _spec(n) for n in ("llama-4-scout", "gpt-oss-120b", "gemma-3-27b-it", "gemma-2-9b-it")
)


def _v(text: str) -> Version:
    return Version.parse(text, "SGLang")


@pytest.mark.parametrize(
    ("version", "scout", "gpt_oss", "gemma3", "gemma2"),
    [
        ("0.4.9", False, False, False, False),  # no hybrid SWA memory yet
        ("0.4.10", False, True, True, True),  # the runner's sliding-window check, not Llama 4
        ("0.5.1", False, True, False, False),  # server_args turns Gemma 2 / 3 off
        ("0.5.6", False, True, False, False),
        ("0.5.7", False, False, False, False),  # is_hybrid_model: MiMo-V2 or the ratio flag
        ("0.5.8", True, True, False, False),  # is_hybrid_swa_model's architecture list
        ("0.5.13", True, True, False, False),
        ("0.5.23", True, True, False, False),
        ("main", True, True, False, False),
    ],
)
def test_which_releases_keep_a_swa_pool(
    version: str, scout: bool, gpt_oss: bool, gemma3: bool, gemma2: bool
) -> None:
    v = _v(version)
    assert swa.uses_swa_pool(SCOUT, v, None) is scout
    assert swa.uses_swa_pool(GPT_OSS, v, None) is gpt_oss
    assert swa.uses_swa_pool(GEMMA3, v, None) is gemma3
    assert swa.uses_swa_pool(GEMMA2, v, None) is gemma2


def test_gpt_oss_on_trtllm_mha_keeps_one_pool_in_0_5_8_and_0_5_9() -> None:
    """server_args v0.5.8-v0.5.9: trtllm_mha (the default on compute capability 10.x) turns
    hybrid SWA memory off for gpt-oss; v0.5.10 no longer does."""
    assert not swa.uses_swa_pool(GPT_OSS, _v("0.5.9"), (10, 0))
    assert swa.uses_swa_pool(GPT_OSS, _v("0.5.9"), (9, 0))
    assert swa.uses_swa_pool(GPT_OSS, _v("0.5.10"), (10, 0))


def test_scout_layers_as_sglang_splits_them() -> None:
    """get_hybrid_layer_ids: layer i of Llama 4 is global when (i + 1) % 4 == 0."""
    assert (SCOUT.kv.num_full_layers, SCOUT.kv.num_local_layers) == (12, 36)
    assert SCOUT.kv.attention_chunk_size == 8192


def test_era_c_split_by_hand() -> None:
    """Scout at TP4: 8 KV heads / 4 x (128 + 128) x 2 B = 1,024 B per layer per token."""
    kv = SCOUT.kv
    split = swa.era_c_tokens(10.0, kv, 4, BF16, 1, 0.8, None)
    cell = 1024 * 12 + 0.8 * 1024 * 36
    assert split.full_tokens == int(int(10 * GiB) // cell)
    assert split.full_tokens == 257_003  # 10 GiB / 41,779.2 B
    assert split.swa_tokens == int(257_003 * 0.8)
    capped = swa.era_c_tokens(10.0, kv, 4, BF16, 64, 0.8, 100_000)
    assert capped == sglang.SwaTokens(99_968, 79_936)


@given(
    rest=st.floats(0.5, 120.0),
    tp=st.sampled_from((1, 2, 4, 8)),
    page=st.sampled_from((1, 16, 64)),
    ratio=st.floats(0.1, 1.0),
)
def test_era_c_split_fills_the_budget(rest: float, tp: int, page: int, ratio: float) -> None:
    kv = GPT_OSS.kv
    per_layer = sglang.cell_size(kv, tp, 1, BF16)
    split = swa.era_c_tokens(rest, kv, tp, BF16, page, ratio, None)
    used = split.full_tokens * per_layer * kv.num_full_layers
    used += split.swa_tokens * per_layer * kv.num_local_layers
    assert used <= int(rest * GiB)
    assert split.swa_tokens <= split.full_tokens * ratio
    # one page more of each pool would not fit in what is left
    step = page * per_layer * (kv.num_full_layers + ratio * kv.num_local_layers)
    assert int(rest * GiB) - used < step + page * per_layer * kv.num_local_layers


def test_swa_pool_under_pp_refused() -> None:
    with pytest.raises(KvtierError, match="pipeline"):
        sglang.check_layers(SCOUT.kv, 2, swa_pool=True)
    sglang.check_layers(SCOUT.kv, 2, swa_pool=False)  # one pool: the plain formula


def _plan(version: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    argv = ["plan", "--gpu", "H200", "--gpus", "4", "--sglang-version", version, "--json"]
    argv += ["--", "python", "-m", "sglang.launch_server", "--model-path"]
    argv += ["meta-llama/Llama-4-Scout-17B-16E-Instruct", "--tp", "4"]
    assert main(argv) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_scout_plan_keeps_two_pools_from_0_5_8(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-4 Scout, 4x H200, TP4: one pool of every layer in v0.5.5, a global pool and a
    chunked-layer pool of 0.8 x its tokens in v0.5.13, in the same bytes."""
    one, two = _plan("0.5.5", capsys), _plan("0.5.13", capsys)
    assert not any("SWA pools" in n for n in one["notes"])  # type: ignore[attr-defined]
    note = next(n for n in two["notes"] if "SWA pools" in n)  # type: ignore[attr-defined]
    full = int(str(two["kv_tokens"]))
    assert f"{full:,} tokens for the 12 global layers" in note
    assert f"{int(full * 0.8):,} for the 36 local ones" in note
    # 36 of 48 layers hold 0.8 of the tokens: (12 + 36) / (12 + 0.8 x 36) = 1.176x the tokens
    # for the same budget, before v0.5.13's different default fraction
    assert full > int(str(one["kv_tokens"]))
    pool = next(i for i in two["ledger"] if i["item"] == "KV cache pool")  # type: ignore[attr-defined]
    assert "1,024 B x 12 global layers" in pool["source"]
    assert f"({int(full * 0.8):,} + page) x 1,024 B x 36 local layers" in pool["source"]
    assert "HybridSWAPoolConfigurator" in pool["source"]
    era_b = _plan("0.5.9", capsys)
    pool = next(i for i in era_b["ledger"] if i["item"] == "KV cache pool")  # type: ignore[attr-defined]
    assert "set_num_tokens_hybrid_swa" in pool["source"]


def test_scout_at_its_10m_context_overflows_on_the_request_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Scout's config states 10,485,760 positions: 2,048 req_to_token rows of int32 are 80 GiB
    per GPU, more than the 4x H200 deployment has left after the pool; plan says so."""
    argv = ["plan", "--gpu", "H200", "--gpus", "4", "--sglang-version", "0.5.23", "--json"]
    argv += ["--", "python", "-m", "sglang.launch_server", "--model-path"]
    argv += ["meta-llama/Llama-4-Scout-17B-16E-Instruct", "--tp", "4"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    table = next(i for i in out["ledger"] if i["item"] == "request table (req_to_token)")
    assert table["gib"] == pytest.approx(2048 * (10_485_760 + 4) * 4 / GiB)
    assert any("run out of memory" in n and "80.00 GiB" in n for n in out["notes"])
    assert main([*argv[:8], "--context-length", "131072", *argv[8:]]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not any("run out of memory" in n for n in out["notes"])
