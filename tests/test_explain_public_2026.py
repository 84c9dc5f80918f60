"""Line forms the 2026 public logs brought: each test quotes the exact line from its source
(tests/fixtures/logs/public/index.json names them), or the engine's template where no public
log prints the line yet."""

# ruff: noqa: E501  (log lines are kept whole, as engines print them)

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.engines.detect import parse_log
from kvtier.engines.sglang import mamba
from kvtier.engines.sglang.log import parse_sglang
from kvtier.engines.vllm.log import VllmStartup, parse_vllm
from kvtier.ledger.explain import explain_log
from kvtier.logs.lines import read_lines
from kvtier.model.catalog import resolve_model

PUBLIC = Path(__file__).parent / "fixtures" / "logs" / "public"

# vllm-project/vllm#44376: the V1 refusal on one line (DeepSeek-V4-Flash, two GH200)
REFUSAL = (
    "(EngineCore pid=2739502) ERROR 06-03 14:24:40 [core.py:1165] ValueError: To serve at least "
    "one request with the model's max seq len (30000), (6.66 GiB KV cache is needed, which is "
    "larger than the available KV cache memory (5.44 GiB). Based on the available memory, the "
    "estimated maximum model length is 13528. Try increasing `gpu_memory_utilization` (which also "
    "controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the "
    "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)


def _vllm(text: str) -> VllmStartup:
    return parse_vllm(read_lines(text))


def _explain_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["explain", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _refusal_facts(s: VllmStartup) -> tuple[object, ...]:
    assert s.failure is not None and s.needed_kv is not None and s.capacity_tokens is not None
    return (
        s.failure.value,
        s.needed_kv.value[:2],
        s.available_kv_gib[0].value,
        s.capacity_tokens.value,
    )


_WRAPS = [
    m.start()
    for m in re.finditer(" ", REFUSAL)
    if REFUSAL.index("(30000),") < m.start() < REFUSAL.index("13528.") - 1
]


@pytest.mark.parametrize("at", _WRAPS)
def test_a_refusal_wrapped_anywhere_after_the_length_reads_as_on_one_line(at: int) -> None:
    """A paste wrapped at the console width, behind a quote bar, states the same refusal."""
    whole = _refusal_facts(_vllm(REFUSAL))
    assert whole == ("max_model_len does not fit the KV cache", (30000, 6.66), 5.44, 13528)
    wrapped = REFUSAL[:at] + "\n▎ " + REFUSAL[at + 1 :]
    assert _refusal_facts(_vllm(wrapped)) == whole


def test_the_wrapped_refusal_from_the_dgx_spark_issue_fails_with_its_capacity(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """eugr/spark-vllm-docker#396: kvtier used to miss the refusal and size 754,974,720 tokens."""
    out = _explain_json(PUBLIC / "vllm-0.29-minimax-m2.7-awq-2x-spark-failed-reflowed.log", capsys)
    assert out["verdict"] == "failed" and out["observed"]["kv_tokens"] == 190_272
    assert out["failed"]["reason"] == "max_model_len does not fit the KV cache"
    low, high = out["predicted"]["range"]
    assert low <= 190_272 <= high < 200_000


def test_startup_use_line_of_the_ascend_worker() -> None:
    """vllm-project/vllm-ascend#8289, cut mid-line in the source: the after-capture summary gives
    free and total memory, the requested budget, the graphs as captured and the pin to use."""
    line = "(EngineCore pid=2884597) INFO 04-15 06:30:01 [worker.py:575] Free memory on device (60.86/61.27 GiB) on startup. Desired GPU memory utilization is (0.9, 55.14 GiB). Actual usage: 1.14 GiB for weights, 0.22 GiB for peak activation, 0.13 GiB for non-torch memory, 0.04 GiB for NPU graph memory. Replace gpu_memory_utilization with `--kv-cache-memory=57403864576` (53.46 GiB) to fit in"
    s = _vllm(line)
    assert [f.value for f in s.init_free_gib] == [60.86]
    assert [f.value for f in s.total_gib] == [61.27]
    assert s.utilization is not None and s.utilization.value == 0.9
    assert [f.value for f in s.requested_gib] == [55.14]
    assert [f.value for f in s.graph_gib] == [0.04]
    assert s.suggested_kv_bytes is not None and s.suggested_kv_bytes.value == 57_403_864_576


# vllm 0.29.0 gpu_worker.py compile_or_warm_up_model (INFO): the template's words; the figures are
# made for the test and obey its arithmetic (pin = requested - used - graphs - 150 MiB)
V029 = """\
(Worker_TP0 pid=11) INFO 09-20 10:00:00 [gpu_worker.py:627] Available KV cache memory: 52.0 GiB
(EngineCore pid=3) INFO 09-20 10:00:01 [kv_cache_utils.py:2235] GPU KV cache size: 425,984 tokens
(Worker_TP0 pid=11) INFO 09-20 10:00:09 [gpu_worker.py:797] CUDA graph pool memory: 0.41 GiB (actual), 0.5 GiB (estimated), difference: 0.09 GiB (22.0%).
(Worker_TP0 pid=11) INFO 09-20 10:00:09 [gpu_worker.py:860] Free memory on device (78.5/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 16.2 GiB for consumed memory (weights + non-torch), 3.07 GiB for peak activation, and 0.41 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=55237054300` (51.44 GiB) to fit into requested memory, or `--kv-cache-memory=63000207687` (58.67 GiB) to fully utilize gpu memory. Current kv cache memory in use is 52.0 GiB.
"""


def test_v029_summary_and_graph_pool_lines_are_read() -> None:
    s = _vllm(V029)
    assert [f.value for f in s.graph_gib] == [0.41, 0.41]  # pool line, then the summary
    assert s.graph_estimate_gib is not None and s.graph_estimate_gib.value == 0.5
    assert s.suggested_kv_bytes is not None and s.suggested_kv_bytes.value == 55_237_054_300
    assert s.suggested_kv_bytes.line == 4  # the first pin: the one that fits the request
    assert [f.value for f in s.requested_gib] == [71.27]


def test_explain_states_the_captured_graphs_and_the_pin() -> None:
    answer = explain_log(V029, {}).ledger.answer
    assert "CUDA graphs took 0.41 GiB as captured against the 0.50 GiB estimated (line 3" in answer
    assert "--kv-cache-memory=55237054300 (51.44 GiB, line 4" in answer


def test_a_negative_graph_pool_figure_is_kept_as_printed() -> None:
    """MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#25 (two GB10): the pool shrank during capture."""
    s = _vllm(
        "CUDA graph pool memory: -0.19 GiB (actual), 2.43 GiB (estimated), difference: 2.62 GiB"
    )
    assert [f.value for f in s.graph_gib] == [-0.19]
    assert s.graph_estimate_gib is not None and s.graph_estimate_gib.value == 2.43


def test_the_graph_probes_block_override_is_not_the_users() -> None:
    """vllm-project/vllm#39559 and the llm-d-planner v0.19 logs print 'Overriding
    num_gpu_blocks=0 with num_gpu_blocks_override=512': the CUDA-graph memory probe's minimal
    cache (gpu_model_runner.py, available_memory=0), so the count is still the budget's."""
    text = (PUBLIC / "vllm-v1-2026-qwen3.5-gguf-262k.log").read_text(encoding="utf-8")
    assert _vllm(text).blocks_override is None
    rec = explain_log(text, {}).reconciliation
    assert not any("num-gpu-blocks-override" in n for n in rec.notes)


def test_a_users_block_override_is_named_and_not_recomputed() -> None:
    """The same template with a sized count (kv_cache_utils.py, num_gpu_blocks > 0): the user's
    --num-gpu-blocks-override; the budget did not size the pool."""
    text = (
        "(EngineCore pid=7) INFO 04-13 19:51:20 [kv_cache_utils.py:2309] Overriding num_gpu_blocks=4480 with num_gpu_blocks_override=512\n"
        "(EngineCore pid=7) INFO 04-13 19:51:24 [gpu_worker.py:436] Available KV cache memory: 6.9 GiB\n"
        "(EngineCore pid=7) INFO 04-13 19:51:24 [kv_cache_utils.py:1319] GPU KV cache size: 8,192 tokens\n"
    )
    s = _vllm(text)
    override = s.blocks_override
    assert override is not None and (override.value, override.line) == (512, 1)
    rec = explain_log(text, {}).reconciliation
    assert any("--num-gpu-blocks-override=512 (line 1)" in n for n in rec.notes)
    assert rec.status == "observed only" and rec.predicted == 8_192
    assert "--num-gpu-blocks-override=512 set the block count" in rec.formula


def test_sglang_2026_pool_line_gives_the_kv_dtype_and_the_draft_pool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """noonghunna/club-3090#1261: 'KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: ...'"""
    path = PUBLIC / "sglang-2026-hybrid-gdn-nvfp4-2x5090-draft-pools.log"
    s = parse_sglang(read_lines(path.read_text(encoding="utf-8")))
    assert [(p.rank, p.tokens, p.k_gib, p.dtype) for p in s.pools_by_rank()] == [
        ("TP0", 454_112, 3.46, "torch.float8_e4m3fn"),
        ("TP1", 454_112, 3.46, "torch.float8_e4m3fn"),
    ]
    assert [(p.rank, p.k_gib) for p in s.pools_by_rank(draft=True)] == [
        ("TP0", 1.08),
        ("TP1", 1.08),
    ]
    out = _explain_json(path, capsys)
    assert out["kv_cache_dtype"] == "fp8_e4m3" and out["kv_bytes_per_token"] == 16_384


def test_arguments_pasted_after_the_kv_lines_belong_to_the_same_start() -> None:
    """noonghunna/club-3090#295: the reporter pasted the KV lines first, the arguments after."""
    text = (PUBLIC / "vllm-v1-2026-qwen3.6-27b-autoround-2x3090-mtp.log").read_text(
        encoding="utf-8"
    )
    parsed = parse_log(text)
    assert isinstance(parsed.startup, VllmStartup) and parsed.startup.args is not None
    assert parsed.startup.args.values["kv_cache_dtype"] == "fp8_e5m2"
    assert any("read as the same start" in n for n in parsed.notes)
    rec = explain_log(text, {}).reconciliation
    assert rec.kv_dtype.name == "fp8_e5m2"


def test_a_second_start_with_its_own_arguments_stays_a_second_start() -> None:
    """Two starts that each print arguments are not merged: the last one is explained."""
    first = "(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'max_model_len': 4096}\nGPU KV cache size: 1,000 tokens"
    second = "(APIServer pid=1) INFO 06-01 09:30:16 [utils.py:278] non-default args: {'max_model_len': 8192}"
    parsed = parse_log(first + "\n" + second)
    assert isinstance(parsed.startup, VllmStartup) and parsed.startup.kv_tokens is not None
    assert not any("same start" in n for n in parsed.notes)


GDN_4090 = PUBLIC / "sglang-2026-qwen3.5-397b-a17b-gdn-4090-tp2.log"


def test_hybrid_gdn_log_takes_its_state_pool_tp_and_geometry_from_the_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """kvcache-ai/ktransformers#1870 (SGLang 0.5.9): Qwen3.5-397B-A17B at TP2. The class Qwen3_5MoeForConditionalGeneration names a
    catalog models; ranks TP0-TP1 print; the Mamba
    line sizes the state pool taken before the KV."""
    s = parse_sglang(read_lines(GDN_4090.read_text(encoding="utf-8")))
    assert [(p.rank, p.slots, p.conv_gib, p.ssm_gib) for p in s.state_pools] == [
        ("TP0", 82, 0.13, 7.29),
        ("TP1", 82, 0.13, 7.29),
    ]
    out = _explain_json(GDN_4090, capsys)
    assert out["kv_bytes_per_token"] == 15_360
    # two catalog models share the class: explain names both and takes the log's geometry
    assert out["model"]["geometry"] == "from the log"
    assert "Qwen/Qwen3.5-35B-A3B, Qwen/Qwen3.5-397B-A17B" in out["model"]["source"]["text"]
    tp = next(i for i in out["inputs"] if i["name"] == "tensor parallel")
    assert tp["value"] == 2 and tp["estimated"]
    state = next(i for i in out["ledger"] if i["item"].startswith("linear-attention state"))
    assert state["gib"] == 7.42 and state["source"].startswith("line 4 (TP0)")
    # without the state pool the same budget would hold about 518,000 tokens more
    assert out["predicted"]["range"][1] < 580_364 + 7.42 * 2**30 / 15_360


def test_hybrid_gdn_log_charges_the_budget_82_of_the_83_printed_state_slots(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With the issue's launch flags (--tp-size 2 --mem-fraction-static 0.85), no model: v0.5.9 takes
    max_mamba_cache_size (82) slots out of rest, while the printed conv + SSM sizes are the
    pool's 83 (slot 0 pads). rest = 19.08 - 22.84 x 0.15 = 15.654 GiB; less 7.42 x 82 / 83 ->
    int(8.3234 GiB x 2^30) // 15,360 = 581,847, +0.26% of the logged 580,364."""
    argv = ["explain", str(GDN_4090), "--mem-fraction-static", "0.85", "--tp", "2"]
    assert main([*argv, "--sglang-version", "0.5.9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["geometry"] == "from the log"
    assert out["predicted"]["kv_tokens"] == 581_847
    assert abs(581_847 - 580_364) / 580_364 < 0.005
    # charged the whole printed pool, as before, the count falls 0.09 GiB of tokens short
    whole = int((19.08 - 22.84 * (1 - 0.85) - 7.42) * 2**30) // 15_360
    assert (580_364 - whole) / 580_364 > 0.008


def test_hybrid_gdn_log_with_the_model_sizes_82_state_slots_by_the_0_5_9_ratio_split(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The catalog's Qwen3.5-397B-A17B: 45 Gated DeltaNet layers x (6,144 / 1 conv channels x 3
    x 2 B + 32 x 128 x 128 x 4 B) = 96,030,720 B a slot at TP2; int(15.654 x 0.9 / 1.9 GiB //
    that) = 82 slots, as printed; 581,629 tokens, +0.22%."""
    argv = ["explain", str(GDN_4090), "--model", "Qwen/Qwen3.5-397B-A17B", "--tp", "2"]
    argv += ["--mem-fraction-static", "0.85"]
    assert main([*argv, "--sglang-version", "0.5.9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["id"] == "Qwen/Qwen3.5-397B-A17B" and out["kv_bytes_per_token"] == 15_360
    assert out["predicted"]["kv_tokens"] == 581_629
    spec = resolve_model("Qwen/Qwen3.5-397B-A17B")
    assert spec.kv.linear is not None
    per_slot = mamba.state_bytes(spec.kv.linear, 2, "float32")
    assert per_slot == 96_030_720
    rest = 19.08 - 22.84 * (1 - 0.85)
    args = (rest, per_slot, 0.9, None, None, False, 1)
    assert mamba.split_budget(mamba.SlotRule.RATIO, *args).slots == 82  # as printed
    # the v0.5.17+ rule also charges the padding slot and would print 81 on this budget
    assert mamba.split_budget(mamba.SlotRule.PADDED, *args).slots == 81


@pytest.mark.parametrize(
    ("line", "utilization"),
    [
        # gpustack/runner#251, vLLM 0.27.1 at TP2
        (
            "(Worker_TP1 pid=448) INFO 08-14 14:07:22 [gpu_worker.py:578] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.8200 is equivalent to --gpu-memory-utilization=0.8048 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.8352. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
            0.82,
        ),
        # vllm-project/vllm#39559, a build before v0.19
        (
            "(EngineCore pid=1259857) INFO 04-13 19:51:24 [gpu_worker.py:470] In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately accounts for CUDA graph memory during KV cache allocation. To try it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.9000 to 0.9690 to maintain the same effective KV cache size.",
            0.9,
        ),
    ],
)
def test_graph_profiling_advice_states_the_utilization_in_force(
    line: str, utilization: float
) -> None:
    s = _vllm(line)
    assert s.utilization is not None and s.utilization.value == utilization
    assert s.utilization.line == 1


def test_club_3090_tp4_lines_give_the_utilization_and_no_count_without_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """noonghunna/club-3090#127 prints no arguments and, in this excerpt, no count: the advice
    line gives 0.92 (not the 0.9 default); with no model and no KV size nothing gives one
    token's bytes, so explain refuses instead of dividing the budget by a placeholder (it
    printed 527,475,671 tokens)."""
    text = (
        "(Worker_TP0 pid=147) INFO 05-14 00:04:17 [gpu_worker.py:460] Available KV cache memory: 15.72 GiB\n"
        "(Worker_TP0 pid=147) INFO 05-14 00:04:17 [gpu_worker.py:475] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9129 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9271. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.\n"
    )
    s = _vllm(text)
    assert s.utilization is not None and (s.utilization.value, s.utilization.line) == (0.92, 2)
    log = tmp_path / "club-3090-127.log"
    log.write_text(text, encoding="utf-8")
    assert main(["explain", str(log), "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no KV token count and no KV size" in err[0]
    assert "--model" in err[0]
    assert main(["explain", str(log), "--model", "Qwen/Qwen3-8B", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "predicted only"


def test_sliding_window_pools_are_read_together(capsys: pytest.CaptureFixture[str]) -> None:
    """sgl-project/sglang#15464 (MiMo-V2-Flash, TP4): two allocations per rank before its pool
    end, whose sum the 'SWAKVPool mem usage' line prints."""
    path = PUBLIC / "sglang-2025-mimo-v2-flash-swa-two-pools-tp4.log"
    s = parse_sglang(read_lines(path.read_text(encoding="utf-8")))
    assert [(p.rank, p.gib, p.swa_tokens, p.full_tokens) for p in s.sliding_pools] == [
        ("TP0", 77.63, 1_496_958, 1_496_958),
        ("TP1", 77.63, 1_496_958, 1_496_958),
        ("TP2", 77.63, 1_496_958, 1_496_958),
        ("TP3", 77.63, 1_496_958, 1_496_958),
    ]
    assert not s.pools_by_rank(draft=True)
    out = _explain_json(path, capsys)
    (pool,) = out["ledger"]
    assert pool["item"].startswith("KV cache pools (target: full + sliding-window")
    assert pool["gib"] == 77.63 and pool["source"].startswith("line 6 (TP0)")


def test_pipeline_parallel_refusal_with_the_releases_spelling() -> None:
    """vllm-project/vllm#32105: 'the models's max seq len' under PP8."""
    text = (PUBLIC / "vllm-v1-2026-pp8-failed-needed-71gib.log").read_text(encoding="utf-8")
    s = _vllm(text)
    assert _refusal_facts(s) == (
        "max_model_len does not fit the KV cache",
        (202_752, 71.16),
        28.57,
        81_392,
    )
    assert s.failure is not None and s.failure.line == 4


# A public vLLM 0.26.0 container log (LFM2.5-1.2B-Instruct, online int4, fp8 KV), from the public
# code index: the after-capture summary printed at INFO, next to the graph pool line.
V026 = """\
(APIServer pid=1) INFO 07-30 07:06:32 [api_utils.py:345]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.26.0
(EngineCore pid=79) INFO 07-30 07:07:11 [gpu_model_runner.py:5347] Model loading took 0.88 GiB memory and 7.012805 seconds
(EngineCore pid=79) INFO 07-30 07:11:00 [gpu_model_runner.py:6737] Estimated CUDA graph memory: 0.58 GiB total
(EngineCore pid=79) INFO 07-30 07:11:00 [gpu_worker.py:560] Available KV cache memory: 13.33 GiB
(EngineCore pid=79) INFO 07-30 07:11:00 [gpu_worker.py:575] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9500 is equivalent to --gpu-memory-utilization=0.9139 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9861. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.
(EngineCore pid=79) INFO 07-30 07:11:00 [kv_cache_utils.py:2177] GPU KV cache size: 2,324,244 tokens
(EngineCore pid=79) INFO 07-30 07:11:00 [kv_cache_utils.py:2178] Maximum concurrency for 32,768 tokens per request: 70.93x
(EngineCore pid=79) INFO 07-30 07:11:20 [gpu_model_runner.py:6844] Graph capturing finished in 5 secs, took 0.24 GiB
(EngineCore pid=79) INFO 07-30 07:11:20 [gpu_worker.py:793] CUDA graph pool memory: 0.24 GiB (actual), 0.58 GiB (estimated), difference: 0.34 GiB (142.2%).
(EngineCore pid=79) INFO 07-30 07:11:20 [gpu_worker.py:857] Free memory on device (15.89/16.0 GiB) on startup. Desired GPU memory utilization is (0.95, 15.2 GiB). Actual usage is 0.88 GiB for weight, 0.26 GiB for peak activation, 0.16 GiB for non-torch memory, and 0.24 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=14514713805` (13.52 GiB) to fit into requested memory, or `--kv-cache-memory=15258363904` (14.21 GiB) to fully utilize gpu memory. Current kv cache memory in use is 13.33 GiB.
"""


def test_v026_info_summary_gives_the_device_the_budget_and_the_pin() -> None:
    s = _vllm(V026)
    assert s.version is not None and s.version.value == "0.26.0"
    assert [f.value for f in s.total_gib] == [16.0]
    assert [f.value for f in s.init_free_gib] == [15.89]
    assert [f.value for f in s.requested_gib] == [15.2]
    assert s.utilization is not None and s.utilization.value == 0.95
    assert [f.value for f in s.graph_gib] == [0.24, 0.24, 0.24]  # finished, pool, summary
    assert s.graph_estimate_gib is not None and s.graph_estimate_gib.value == 0.58
    assert s.suggested_kv_bytes is not None and s.suggested_kv_bytes.value == 14_514_713_805
    e = explain_log(V026, {})
    answer = e.ledger.answer
    assert "CUDA graphs took 0.24 GiB as captured against the 0.58 GiB estimated" in answer
    assert "--kv-cache-memory=14514713805 (13.52 GiB, line 10)" in answer
    items = {i.item: i.gib for i in e.ledger.items}
    assert items["device total (as CUDA reports it)"] == 16.0
    assert round(items["outside vLLM's budget: total x (1 - utilization)"], 2) == 0.8


def test_tp_is_inferred_only_from_ranks_tp0_to_tpn(capsys: pytest.CaptureFixture[str]) -> None:
    """sgl-project/sglang#29853 shows TP4, TP5, TP10, TP13 and TP14 of sixteen: no size follows
    from that, so no TP is inferred; the MiMo excerpt shows TP0-TP3: at least 4."""
    out = _explain_json(PUBLIC / "sglang-2026-grok2-ascend-npu-tp16.log", capsys)
    assert not [i for i in out["inputs"] if i["name"] == "tensor parallel"]
    out = _explain_json(PUBLIC / "sglang-2025-mimo-v2-flash-swa-two-pools-tp4.log", capsys)
    (tp,) = [i for i in out["inputs"] if i["name"] == "tensor parallel"]
    assert tp["value"] == 4 and tp["estimated"]
    assert tp["source"]["text"] == "at least 4: the log prints ranks TP0-TP3, no tp argument"
