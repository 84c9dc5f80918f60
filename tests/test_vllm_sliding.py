"""vLLM sliding-window groups per release: a group holds its window plus the tokens in flight,
max_num_batched_tokens through v0.25.x and VllmConfig.max_in_flight_tokens from v0.26.0
(SlidingWindowSpec.max_admission_blocks_per_request)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvtier.engines.deployment import Deployment, Engine, Measured, Profile
from kvtier.engines.launch import parse_launch
from kvtier.engines.version import Version
from kvtier.engines.vllm import pool as vllm
from kvtier.engines.vllm import sliding
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import plan

ROOT = Path(__file__).resolve().parents[1]

# gpt-oss-20b on one H100 at 131,072: 12 full + 12 sliding layers of window 128, block 16
MEASURED = Measured(
    profile=Profile(activation_gib=2.0, non_torch_gib=0.25), weights_gib=13.5, gpu_mem_gib=79.19
)
GPT_OSS = Deployment(
    Engine.VLLM, "openai/gpt-oss-20b", gpu="H100", context_length=131_072, measured=MEASURED
)


def _v(text: str) -> Version:
    return Version.parse(text, "vLLM")


def test_the_bound_is_max_in_flight_tokens_from_v0_26_0() -> None:
    """max_concurrent_batches: 2 under async scheduling at PP1, else the pipeline's stages."""
    assert sliding.in_flight_tokens(_v("0.25.1"), 8192, 1, True) == 8192
    assert sliding.in_flight_tokens(_v("0.26.0"), 8192, 1, True) == 16_384
    assert sliding.in_flight_tokens(_v("0.33.0"), 2048, 1, True) == 4096
    assert sliding.in_flight_tokens(_v("0.26.0"), 8192, 1, False) == 8192
    assert sliding.in_flight_tokens(_v("0.26.0"), 8192, 4, True) == 4 * 8192


@pytest.mark.parametrize(
    ("given", "method", "on"),
    [
        (None, None, True),  # VllmConfig.__post_init__ turns it on
        (False, None, False),  # --no-async-scheduling
        (None, "EAGLE3", True),
        (None, "DEEPSEEK_MTP", True),
        (None, "NGRAM", False),  # outside EagleModelTypes / NgramGPUTypes: turned off
        (None, "DRAFT_MODEL", False),
        (True, "NGRAM", True),
    ],
)
def test_async_scheduling_default(given: bool | None, method: str | None, on: bool) -> None:
    assert sliding.async_scheduling(given, method) is on


def test_gpt_oss_sliding_groups_per_release() -> None:
    """A request at 131,072 holds 8,192 full blocks and cdiv(127 + 8,192, 16) + 1 = 521 sliding
    ones through v0.25.1; v0.26.0's 2 x 8,192 in flight make it cdiv(127 + 16,384, 16) + 1 =
    1,033, so the same blocks log 5.5% fewer tokens."""
    counts = {}
    for version, sliding_blocks in (("0.25.1", 521), ("0.26.0", 1033)):
        ledger = plan(dataclasses.replace(GPT_OSS, engine_version=version))
        blocks = ledger.figures.num_blocks
        assert ledger.kv_tokens == int(blocks / (8192 + sliding_blocks) * 131_072)
        counts[version] = ledger.kv_tokens
    assert counts["0.26.0"] == pytest.approx(counts["0.25.1"] * 8713 / 9225, abs=1)
    note = next(n for n in plan(GPT_OSS).notes if n.startswith("hybrid KV groups"))
    assert note.endswith("sliding window 128, max_num_batched_tokens 8192")
    on_26 = plan(dataclasses.replace(GPT_OSS, engine_version="0.26.0"))
    note = next(n for n in on_26.notes if n.startswith("hybrid KV groups"))
    assert note.endswith("max_in_flight_tokens 16384 (2 x max_num_batched_tokens)")


def test_no_async_scheduling_on_the_launch_line_keeps_one_batch() -> None:
    launch = parse_launch(["vllm serve openai/gpt-oss-20b --no-async-scheduling"])
    assert launch.values["async_scheduling"] is False
    off = dataclasses.replace(GPT_OSS, engine_version="0.26.0", async_scheduling=False)
    before = dataclasses.replace(GPT_OSS, engine_version="0.25.1")
    assert plan(off).kv_tokens == plan(before).kv_tokens


def test_the_layout_helper_takes_the_bound_as_given() -> None:
    layout = vllm.hybrid_layout(12, 12)
    assert vllm.hybrid_blocks_per_request(layout, 131_072, 16, 128, 16_384) == 8192 + 1033


GEMMA3_LOG = ROOT / "tests" / "fixtures" / "logs" / "public" / "vllm-0.19-gemma-3-12b-h100.log"
# VllmConfig.__post_init__'s line, as vLLM v0.2x prints it after the chunked-prefill line
ASYNC_LINE = "(APIServer pid=1) INFO 04-22 16:04:09 [vllm.py:754] Asynchronous scheduling is {}.\n"


@pytest.mark.parametrize(("word", "on"), [("enabled", True), ("disabled", False)])
def test_explain_takes_the_logged_async_scheduling_into_the_deployment(word: str, on: bool) -> None:
    lines = GEMMA3_LOG.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "Chunked prefill is enabled" in line) + 1
    text = "".join([*lines[:at], ASYNC_LINE.format(word), *lines[at:]])
    d = explain_log(text, {}).deployment
    assert d.async_scheduling is on
    assert dict(d.origins)["async_scheduling"] == f"log line {at + 1}"
    assert explain_log("".join(lines), {}).deployment.async_scheduling is None
