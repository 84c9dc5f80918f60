"""Hybrid linear-attention models (Qwen3-Next, Qwen3.5 / 3.6) on both engines.

The spec reads which layers are Gated DeltaNet and the shape of their recurrent state; SGLang
splits the budget between state slots and the full-attention KV (engines/sglang/mamba.py, checked
against the wheels by tests/test_oracle_sglang_mamba.py); vLLM pads the state page to an
attention block and groups both kinds of layer (engines/vllm/mamba.py), which reproduces the
public vLLM 0.24 Qwen3.6-35B-A3B log to the token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_support import error_line, refusal, run_json
from kvtier.engines.sglang import mamba as sglang_mamba
from kvtier.engines.sglang import versions as sglang_versions
from kvtier.engines.version import Version
from kvtier.engines.vllm import mamba as vllm_mamba
from kvtier.errors import UnsupportedModel
from kvtier.model.catalog import resolve_model
from kvtier.model.config import model_from_config
from kvtier.model.description import LinearAttention
from kvtier.units import GiB

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"
PUBLIC_LOG = (
    Path(__file__).resolve().parent
    / "fixtures"
    / "logs"
    / "public"
    / "vllm-0.24-qwen3.6-35b-a3b-nvfp4-5090.log"
)
QWEN35_MOE = str(CONFIGS / "qwen3.5-35b-a3b.json")


def _config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("name", "full", "linear", "value_heads"),
    [("qwen3.5-35b-a3b", 10, 30, 32), ("qwen3.5-27b", 16, 48, 48)],
)
def test_every_fourth_layer_is_full_attention(
    name: str, full: int, linear: int, value_heads: int
) -> None:
    spec = model_from_config(_config(name), name)
    state = spec.kv.linear
    assert state is not None
    assert spec.kv.num_layers == full and len(state.layer_ids) == linear
    assert all(i % 4 != 3 for i in state.layer_ids)
    assert (state.num_key_heads, state.num_value_heads) == (16, value_heads)
    assert (state.key_head_dim, state.value_head_dim, state.conv_kernel) == (128, 128, 4)
    assert state.ssm_dtype == "float32"
    # without `layer_types` the engines' full_attention_interval gives the same layers
    config = _config(name)
    del config["text_config"]["layer_types"]
    assert model_from_config(config, name).kv == spec.kv


def test_catalog_entries_are_the_published_files() -> None:
    for name, model_id in (("qwen3.5-35b-a3b", "Qwen/Qwen3.5-35B-A3B"), ("qwen3.5-27b", None)):
        spec = model_from_config(_config(name), name)
        entry = resolve_model(model_id or name)
        assert (spec.kv, spec.params, spec.dtype) == (entry.kv, entry.params, entry.dtype)


def test_qwen3_next_catalog_entry() -> None:
    spec = resolve_model("qwen3-next-80b-a3b")
    assert spec.architecture == "Qwen3NextForCausalLM"
    assert spec.kv.num_layers == 12 and spec.kv.linear is not None
    assert spec.kv.linear.ssm_dtype is None  # the file states none: each engine's default
    assert (spec.num_experts, spec.experts_per_token) == (512, 10)
    assert 79e9 < spec.total_params < 81e9  # "80B" total, "A3B" active
    assert 2.5e9 < spec.active_params < 4e9


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda t: t.update(layer_types=["linear_attention"] * 39 + ["mamba"]), "'mamba'"),
        (lambda t: t.update(mamba_ssm_dtype="int8"), "mamba_ssm_dtype"),
        (lambda t: t.update(linear_num_value_heads=0), "linear_num_value_heads"),
    ],
)
def test_bad_linear_fields_are_refused_by_name(edit: Any, named: str) -> None:
    config = _config("qwen3.5-35b-a3b")
    edit(config["text_config"])
    with pytest.raises(UnsupportedModel, match=named):
        model_from_config(config, "qwen3.5-35b-a3b")


STATE = LinearAttention(tuple(range(30)), 16, 32, 128, 128, 4, "float32")


def test_sglang_state_bytes_per_slot() -> None:
    # 30 layers x (conv (2 x 16 x 128 + 32 x 128) x 3 in bf16 + SSM 32 x 128 x 128 in fp32)
    assert sglang_mamba.state_bytes(STATE, 1, "float32") == 30 * (8192 * 3 * 2 + 524288 * 4)
    assert sglang_mamba.state_bytes(STATE, 2, "float32") == 32_194_560
    assert sglang_mamba.state_bytes(STATE, 1, "bfloat16") == 30 * (8192 * 3 * 2 + 524288 * 2)


def _sglang(capsys: pytest.CaptureFixture[str], version: str, *launch: str) -> dict[str, Any]:
    argv = ["plan", "--engine", "sglang", "--model", QWEN35_MOE, "--gpu", "H200"]
    argv += ["--free-before-load-gib", "139.45", "--free-after-load-gib", "72.00"]
    argv += ["--mem-fraction-static", "0.85", "--sglang-version", version, "--json"]
    if launch:
        argv += ["--", "python", "-m", "sglang.launch_server", "--model-path", QWEN35_MOE, *launch]
    return run_json(capsys, argv)


def _state_gib(out: dict[str, Any]) -> float:
    (gib,) = [i["gib"] for i in out["ledger"] if i["item"].startswith("linear-attention state")]
    return float(gib)


def test_sglang_splits_the_budget_by_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    out = _sglang(capsys, "0.5.9")
    per_slot = 64_389_120
    rest = 72.00 - 139.45 * (1 - 0.85)
    slots = int(rest * 0.9 / 1.9 * GiB // per_slot)
    assert _state_gib(out) == pytest.approx(slots * per_slot / GiB, abs=1e-4)
    # the KV of the 10 full-attention layers only: 10 x 2 heads x 512 x 2 B
    assert out["kv_bytes_per_token"] == 20_480
    assert out["kv_tokens"] == int((rest - slots * per_slot / GiB) * GiB) // 20_480
    # three state slots per running request with the radix cache on
    assert out["max_running_requests"] <= slots // 3


def test_sglang_0_5_17_counts_the_padding_slot(capsys: pytest.CaptureFixture[str]) -> None:
    before, after = _sglang(capsys, "0.5.16"), _sglang(capsys, "0.5.17")
    # one slot fewer by the joint solve, plus the padding slot: the same state memory
    assert _state_gib(after) == pytest.approx(_state_gib(before), abs=1e-9)
    assert after["kv_tokens"] == before["kv_tokens"]


def test_sglang_launch_flags_set_the_slots(capsys: pytest.CaptureFixture[str]) -> None:
    out = _sglang(capsys, "0.5.9", "--disable-radix-cache", "--max-running-requests", "64")
    assert _state_gib(out) == pytest.approx(64 * 64_389_120 / GiB, abs=1e-4)
    assert out["max_running_requests"] == 64  # one slot per request without the radix cache
    half = _sglang(capsys, "0.5.9", "--mamba-full-memory-ratio", "0.45")
    assert _state_gib(half) < _state_gib(_sglang(capsys, "0.5.9"))


def test_sglang_refuses_speculation_on_hybrid_linear(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--engine", "sglang", "--model", QWEN35_MOE, "--gpu", "H200"]
    line = error_line(capsys, [*argv, "--speculative-algorithm", "EAGLE"])
    assert "not modelled" in line


def _vllm(capsys: pytest.CaptureFixture[str], *launch: str) -> dict[str, Any]:
    argv = ["plan", "--engine", "vllm", "--model", QWEN35_MOE, "--gpu", "RTX 5090"]
    argv += ["--kv-cache-memory-bytes", str(int(5.98 * GiB)), "--vllm-version", "0.24.0"]
    argv += ["--json", "--", "vllm", "serve", QWEN35_MOE, "--kv-cache-dtype", "fp8"]
    return run_json(capsys, [*argv, "--max-model-len", "131072", *launch])


def test_vllm_reproduces_the_public_qwen3_6_log(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.6-35B-A3B (the Qwen3.5-35B-A3B architecture), fp8 KV, prefix caching on, 5.98 GiB:
    the log prints 'GPU KV cache size: 567,978 tokens' and 4.33x for 131,072 tokens."""
    text = PUBLIC_LOG.read_text()
    assert "GPU KV cache size: 567,978 tokens" in text and "'enable_prefix_caching': True" in text
    out = _vllm(capsys, "--enable-prefix-caching")
    # attention pages of 2,096 tokens x 1,024 B = the 2,146,304 B state page, unpadded
    assert out["page_size"] == 2096
    assert out["kv_tokens"] == 567_978
    (conc,) = [c for c in out["concurrency"] if c["context"] == 131_072]
    assert f"{conc['requests']:.2f}" == "4.33"


def test_vllm_without_prefix_caching_holds_one_state_block(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 299 blocks; a request holds 63 attention blocks and 1 (not 2) per linear group
    out = _vllm(capsys)
    assert out["kv_tokens"] == int(299 / (63 + 3) * 131_072)


def test_vllm_state_page_and_block_size() -> None:
    page = vllm_mamba.state_page_bytes(STATE, 1, "bfloat16", "float32")
    assert page == 8192 * 3 * 2 + 524288 * 4 == 2_146_304
    # fp8 attention: 2 heads x 512 B per token; bf16: twice that, half the block
    assert vllm_mamba.attention_block_size(page, 1024, 16) == 2096
    assert vllm_mamba.attention_block_size(page, 2048, 16) == 1056
    assert vllm_mamba.attention_block_size(page, 2048, 4096) == 4096  # a larger block stays


def test_explain_checks_the_public_log_against_the_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The geometry from the model's file, the fp8 cache and prefix caching as the log's
    arguments state them (given as flags too: the excerpt prints them after its KV lines)."""
    argv = ["explain", str(PUBLIC_LOG), "--model", QWEN35_MOE, "--kv-cache-dtype", "fp8"]
    out = run_json(capsys, [*argv, "--enable-prefix-caching", "--json"])
    assert out["observed"]["kv_tokens"] == out["predicted"]["kv_tokens"] == 567_978
    # without the model, the log's own figures still match
    alone = run_json(capsys, ["explain", str(PUBLIC_LOG), "--json"])
    low, high = alone["predicted"]["range"]
    assert low <= 567_978 <= high


def test_explain_prices_the_hybrid_pool_by_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    """Blocks hold attention and state pages alike: the pool is blocks x page x group size
    (299 x 2,146,304 B x 10 = 5.98 GiB), not the logged tokens x one token's KV."""
    argv = ["explain", str(PUBLIC_LOG), "--model", QWEN35_MOE, "--kv-cache-dtype", "fp8"]
    out = run_json(capsys, [*argv, "--enable-prefix-caching", "--json"])
    items = {i["item"]: i["gib"] for i in out["ledger"]}
    assert items["KV cache blocks allocated"] == pytest.approx(299 * 2_146_304 * 10 / GiB, abs=1e-4)


def test_sglang_versions_before_the_architecture_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--engine", "sglang", "--model", "qwen3.5-27b", "--gpu", "H100"]
    line = error_line(capsys, [*argv, "--sglang-version", "0.5.8"])
    assert "does not run Qwen3_5ForConditionalGeneration (first in v0.5.9)" in line


def test_sglang_0_5_3_fixes_512_slots(capsys: pytest.CaptureFixture[str]) -> None:
    """v0.5.3 reserves 512 slots whatever the budget: Qwen3-Next's 36 linear layers at
    2,146,304 B each (36.84 GiB) leave a B200 at the default fraction no KV."""
    argv = ["plan", "--engine", "sglang", "--model", "qwen3-next-80b-a3b", "--gpu", "B200"]
    out = refusal(capsys, [*argv, "--sglang-version", "0.5.3"])
    assert "512 state slots of 77,266,944 B (36.84 GiB)" in out["message"]
    # with 32 slots the same card has room
    out = run_json(capsys, [*argv, "--sglang-version", "0.5.3", "--max-running-requests", "32",
                            "--json"])  # fmt: skip
    assert _state_gib(out) == pytest.approx(32 * 77_266_944 / GiB, abs=1e-4)
    assert out["max_running_requests"] <= 32


def test_sglang_widens_key_heads_from_0_5_4() -> None:
    # 2 key heads over tp 4: Mamba2StateShape widens them to 4 (v0.5.4+), v0.5.3 does not
    state = LinearAttention((0,), 2, 8, 128, 128, 4)
    widened = (8 * 128 + 2 * 4 * 128) // 4 * 3 * 2 + 2 * 128 * 128 * 4
    plain = (8 * 128 + 2 * 2 * 128) // 4 * 3 * 2 + 2 * 128 * 128 * 4
    assert sglang_mamba.state_bytes(state, 4, "float32") == widened
    assert sglang_mamba.state_bytes(state, 4, "float32", widen=False) == plain


def test_sglang_counts_the_padding_slot_as_a_public_log_shows() -> None:
    """SGLang serving Qwen3.5-397B-A17B at TP2 (github.com/kvcache-ai/ktransformers/issues/1870,
    February 2026) prints 'Mamba Cache is allocated. max_mamba_cache_size: 82, conv_state size:
    0.13GB, ssm_state size: 7.29GB' and 'KV Cache is allocated. #tokens: 580364'. The sizes are
    those of 83 slots: the 82 of the slot rule and the pool's padding slot."""
    spec = model_from_config(_config("qwen3.5-397b-a17b"), "qwen3.5-397b-a17b")
    state = spec.kv.linear
    assert state is not None and len(state.layer_ids) == 45
    per_slot = sglang_mamba.state_bytes(state, 2, "float32")
    conv = len(state.layer_ids) * (state.conv_dim // 2 * 3 * 2)
    assert (round(83 * conv / GiB, 2), round(83 * (per_slot - conv) / GiB, 2)) == (0.13, 7.29)
    # the budget the KV line implies: 15 full-attention layers x 1 KV head per rank x 512 x 2 B
    cell = 15 * 512 * 2
    rest = ((580_364 + 0.5) * cell + 83 * per_slot) / GiB
    args = (rest, per_slot, 0.9, None, None, False, 1)
    padded = sglang_mamba.split_budget(sglang_mamba.SlotRule.PADDED, *args)
    assert padded.slots == 82
    assert int(padded.rest_gib * GiB) // cell == 580_364
    # the rule before v0.5.17 would spend that budget on 83 slots; it charges rest only the 82
    # it prints, so it fits a budget 1 slot smaller: the log's own figures fit both rules, and
    # the launch line's fraction settles it for v0.5.9 (test_explain_public_2026)
    assert sglang_mamba.split_budget(sglang_mamba.SlotRule.RATIO, *args).slots == 83
    ratio_rest = ((580_364 + 0.5) * cell + 82 * per_slot) / GiB
    ratio = sglang_mamba.split_budget(sglang_mamba.SlotRule.RATIO, ratio_rest, *args[1:])
    assert ratio.slots == 82 and int(ratio.rest_gib * GiB) // cell == 580_364


@pytest.mark.parametrize(
    ("version", "charged_slots"),
    [("0.5.3", 82), ("0.5.9", 82), ("0.5.16", 82), ("0.5.17", 83), ("main", 83), (None, 82)],
)
def test_sglang_printed_state_pool_holds_the_padding_slot_the_budget_is_not_charged(
    version: str | None, charged_slots: int
) -> None:
    """MambaPool allocates max_mamba_cache_size + 1 slots; rest is charged the padding slot only
    from v0.5.17 (no version is v0.5.9)."""
    parsed = sglang_versions.DEFAULT.resolve(version)
    printed = 83 * 96_030_720 / GiB
    charged = sglang_mamba.charged_state_gib(printed, 82, parsed)
    assert charged == pytest.approx(charged_slots * 96_030_720 / GiB)


def test_sglang_before_0_5_13_starts_with_no_state_slot(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A budget that holds no slot: v0.5.9 goes on with none (and no running request), v0.5.13
    refuses with the engine's own message."""
    argv = ["plan", "--engine", "sglang", "--model", QWEN35_MOE, "--gpu", "H200"]
    argv += ["--free-before-load-gib", "139.45", "--free-after-load-gib", "21.00"]
    argv += ["--mem-fraction-static", "0.85"]
    out = run_json(capsys, [*argv, "--sglang-version", "0.5.9", "--json"])
    assert out["max_running_requests"] == 0 and _state_gib(out) == 0
    line = error_line(capsys, [*argv, "--sglang-version", "0.5.13"])
    assert "Not enough GPU memory for hybrid (mamba/linear-attention) state cache" in line


@pytest.mark.parametrize(
    ("model", "version", "per_request"),
    [
        ("qwen3.5-35b-a3b", "0.5.13", 3),  # auto is no_buffer before v0.5.14
        ("qwen3.5-35b-a3b", "0.5.14", 5),  # auto is extra_buffer: 2 ping-pong slots more
        ("qwen3.5-35b-a3b", "0.5.23", 5),
        ("qwen3-next-80b-a3b", "0.5.18", 5),
        ("qwen3-next-80b-a3b", "0.5.19", 3),  # Qwen3-Next left the extra_buffer list
    ],
)
def test_sglang_slots_per_running_request_by_release(
    model: str, version: str, per_request: int, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--engine", "sglang", "--model", model, "--gpu", "B200"]
    argv += ["--free-before-load-gib", "177.00", "--free-after-load-gib", "120.00"]
    out = run_json(capsys, [*argv, "--mem-fraction-static", "0.9", "--sglang-version", version,
                            "--json"])  # fmt: skip
    spec = resolve_model(model)
    assert spec.kv.linear is not None
    per_slot = sglang_mamba.state_bytes(spec.kv.linear, 1, "float32")
    padded = Version.parse(version, "SGLang") >= Version.release_of(0, 5, 17)
    slots = round(_state_gib(out) * GiB / per_slot) - padded
    assert out["max_running_requests"] == slots // per_request
