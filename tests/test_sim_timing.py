"""The timing model's formulas, and the founding deployment as the simulator sizes it."""

from __future__ import annotations

import math

import pytest

from kvtier.cli.flags import FLAGS
from kvtier.engines.deployment import Deployment, Engine, HiCache
from kvtier.errors import KvtierError
from kvtier.model import resolve_model, weight_bytes
from kvtier.sim import timing
from kvtier.sim.setup import build_config
from kvtier.sim.setup_timing import model_cost
from kvtier.sim.speculative import SpecDecode
from kvtier.sim.timing import (
    Hardware,
    ModelCost,
    TimingFlags,
    TimingModel,
    default_host_gbps,
    sum_max,
)

DENSE = ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192)
H100 = Hardware(989.0, 3350.0, 64.0, 256.0, 8)


def test_prefill_flops_are_linear_plus_causal_attention() -> None:
    tm = TimingModel(DENSE, H100, 1)
    # 100 new tokens after 1000 cached: pairs = 100 x 1000 + 100 x 101 / 2
    pairs = 100 * 1000 + 5050
    assert tm.prefill_flops(100, 1000) == 2 * 8e9 * 100 + 2 * 32 * 8192 * pairs
    assert tm.prefill_s(100, 1000) == tm.prefill_flops(100, 1000) / (989e12 * 0.4)
    assert TimingModel(DENSE, H100, 4).prefill_s(100, 0) == tm.prefill_s(100, 0) / 4


def test_decode_steps_add_up_one_by_one() -> None:
    tm = TimingModel(DENSE, H100, 1)
    one_by_one = sum(tm.decode_steps_s(1, 5000 + 7 * j, 7) for j in range(40))
    assert tm.decode_steps_s(40, 5000, 7) == pytest.approx(one_by_one, rel=1e-12)
    assert tm.decode_steps_s(1, 0, 1) == 16e9 / (3350e9 * 0.8)


def test_a_batch_sizes_kept_terms_give_the_same_floats_as_its_lines() -> None:
    moe = ModelCost(
        3_000_000_000, 9e9, 70_272, 61, 24_576, 600e9, 256, 8, hidden_size=7168
    )  # an MoE on four ranks, all-reduces priced
    hw = Hardware(989.0, 3350.0, 64.0, 256.0, 8, allreduce_gbps=300.0, step_overhead_s=1e-3)
    for tm in (TimingModel(DENSE, H100, 1), TimingModel(moe, hw, 4)):
        for batch in (1, 2, 7, 12, 64, 255):
            terms = tm.decode_batch(batch)
            for kv in (0, 1, 5000, 123_457, 9_999_999):
                lines = tm.decode_lines(kv, batch)
                assert terms.lines(kv) == lines
                one = lines.const + sum_max(lines.mem, lines.comp, 1)  # total(1) without its
                assert terms.first_s(kv) == lines.total(1) == one  # shortcut
                assert tm.decode_tokens_s(1, kv, batch) == one
                assert terms.lines(kv).total(9) == tm.decode_tokens_s(9, kv, batch)


@pytest.mark.parametrize("budget", [1e-4, 0.005, 0.3, 2.0])
def test_decode_steps_before_is_the_fewest_steps_reaching_the_budget(budget: float) -> None:
    tm = TimingModel(DENSE, H100, 1)
    k = tm.decode_steps_before(budget, 20_000, 16)
    assert tm.decode_steps_s(k, 20_000, 16) >= budget
    assert k == 1 or tm.decode_steps_s(k - 1, 20_000, 16) < budget


def test_moe_decode_reads_only_the_experts_a_batch_touches() -> None:
    moe = ModelCost(
        1, 10e9, 1, 1, 1, expert_bytes_per_rank=80e9, num_experts=64, experts_per_token=4
    )
    assert moe.weight_bytes_read(1) == pytest.approx(10e9 + 80e9 * 4 / 64)
    assert moe.weight_bytes_read(2) == pytest.approx(10e9 + 80e9 * (1 - (60 / 64) ** 2))
    assert moe.weight_bytes_read(10_000) == pytest.approx(90e9)


@pytest.mark.parametrize(
    ("model", "tp", "row"),
    [
        ("Qwen/Qwen3-8B", 1, 4_096 * 2),  # untied: 151,936 x 4,096 x 2 B = 1.24 GB not read
        ("Qwen/Qwen3-32B", 2, 5_120 * 2),  # a rank's vocabulary shard, looked up by row
        ("Qwen/Qwen3-0.6B", 1, 0),  # tied: the one table is the LM head, read whole
    ],
)
def test_a_step_reads_the_lm_head_whole_and_the_input_embedding_by_row(
    model: str, tp: int, row: int
) -> None:
    d = Deployment(Engine.VLLM, model, tp=tp, gpu="h100")
    spec = resolve_model(model)
    weights = weight_bytes(spec, tp, None)
    held = {g.name: g.bytes_per_rank for g in weights.groups}
    cost = model_cost(spec, d, 1)
    assert cost.embedding_row_bytes == row
    table = held["embedding"] if row else 0
    assert cost.weight_bytes_per_rank == weights.total_bytes - table
    assert cost.weight_bytes_read(3) == cost.weight_bytes_per_rank + 3 * row
    if row:
        assert held["lm_head"] == held["embedding"]  # the head read whole, its twin by row


def test_loads_share_the_host_side_of_the_node() -> None:
    assert TimingModel(DENSE, H100, 8).load_gbps == 32.0  # 256 GB/s over 8 loading GPUs
    assert TimingModel(DENSE, H100, 2).load_gbps == 64.0  # the link is the limit
    tm = TimingModel(DENSE, H100, 8)
    assert tm.load_s(1000) == 1000 * 131_072 / 32e9
    assert default_host_gbps(25.0, 8) == 100.0


def test_layerwise_overlap_hides_the_shorter_of_load_and_compute() -> None:
    tm = TimingModel(DENSE, H100, 1)  # 32 layers
    assert tm.overlapped_s(3.2, 0.0) == pytest.approx(3.2)
    # load 1.6 s, compute 3.2 s: 32 x 0.1 + 0.05 (the first layer's load is not hidden)
    assert tm.overlapped_s(3.2, 1.6) == pytest.approx(3.25)
    assert tm.overlapped_s(1.6, 3.2) == pytest.approx(3.25)


def founding(**values: object) -> Deployment:
    return Deployment(
        Engine.SGLANG, "kimi-k2.5", tp=8, gpu="RTX PRO 6000", mem_fraction=0.88, **values
    )  # type: ignore[arg-type]


def test_founding_deployment_as_the_simulator_sizes_it() -> None:
    config = build_config(
        founding(hicache=HiCache(enable=True, ratio=4.0)), 512, device_tokens=159_277
    )
    assert config.device_blocks == 159_277 // 512 == 311
    # HostKVCache: int(159277 x 4) tokens, aligned up by one page of 1
    assert config.host_tokens == 637_109
    assert config.host_blocks == 1244
    assert config.chunked_prefill_size == 8192  # 96 GB card: the < 160 GiB tier
    assert config.max_running_requests == 2048
    cost = config.timing.model
    assert cost.kv_bytes_per_token == 70_272  # (512 + 64) x 61 x 2 B
    assert cost.attention_dim == 64 * (2 * 512 + 64)
    assert (cost.num_experts, cost.experts_per_token) == (384, 8)
    assert config.timing.load_gbps == 32.0  # 64 GB/s links, 8 GPUs over 4 host links


def test_page_size_sets_the_capacity_of_a_block() -> None:
    config = build_config(founding(page_size=96), 512, device_tokens=159_277)
    assert config.block_tokens == 6 * 96
    assert config.device_blocks == 159_277 // 576


def test_flags_override_the_catalog() -> None:
    flags = TimingFlags(pcie_gbps=25.0, host_gbps=400.0, gpus_per_node=8)
    config = build_config(founding(), 512, device_tokens=10_000, timing=flags)
    assert config.timing.load_gbps == 25.0
    assert math.isclose(config.timing.hw.bf16_dense_tflops, 504.0)


@pytest.mark.parametrize(
    ("deployment", "message"),
    [
        (
            Deployment(Engine.VLLM, "llama-3.1-8b", gpu="h100", hicache=HiCache(ratio=2.0)),
            "--hicache-ratio is an SGLang HiCache flag",
        ),
        (Deployment(Engine.SGLANG, "kimi-k2.5", tp=8), "needs the GPU"),
        (Deployment(Engine.SGLANG, "kimi-k2.5", tp=4, pp=2, gpu="RTX PRO 6000"), "--pp"),
    ],
)
def test_what_the_simulator_does_not_model_is_refused(deployment: Deployment, message: str) -> None:
    with pytest.raises(KvtierError, match=message):
        build_config(deployment, 512, device_tokens=10_000)


def test_every_forward_pass_pays_the_fixed_cost() -> None:
    # 1 ms a pass: a plain decode step pays it once, an EAGLE-3 iteration of 4 draft passes and
    # a verify five times, a prefill batch once however many chunks it holds
    paid = Hardware(989.0, 3350.0, 64.0, 256.0, 8, step_overhead_s=1e-3)
    eagle = SpecDecode("EAGLE3", 4, 4, 16, 2.88, "given", 0.26e9, 4096.0)
    for spec, passes in ((None, 1), (eagle, 5)):
        free, cost = (TimingModel(DENSE, hw, 1, spec=spec) for hw in (H100, paid))
        extra = cost.decode_steps_s(3, 344, 2) - free.decode_steps_s(3, 344, 2)
        assert extra == pytest.approx(3 * passes * 1e-3, rel=1e-9)
    assert TimingModel(DENSE, paid, 1).prefill_batch_s(0.25) == 0.25 + 1e-3


@pytest.mark.parametrize(
    ("gpu", "given", "seconds", "words"),
    [
        ("h100", None, 1.35e-3, "1.35 ms a forward pass (calibrated on H100 / H200"),
        ("A100 80GB", None, 1.35e-3, "(uncalibrated on A100 80GB: set on H100 / H200;"),
        ("h100", 0.0, 0.0, "0 ms a forward pass (--step-overhead-ms)"),
    ],
)
def test_the_forward_cost_says_where_it_was_set(
    gpu: str, given: float | None, seconds: float, words: str
) -> None:
    d = Deployment(Engine.SGLANG, "llama-3.1-8b", gpu=gpu, mem_fraction=0.88)
    flags = TimingFlags(step_overhead_ms=given)
    config = build_config(d, 512, device_tokens=100_000, timing=flags)
    assert config.timing.hw.step_overhead_s == pytest.approx(seconds)
    assert words in dict(config.sources)["timing"]


@pytest.mark.parametrize(
    ("gpu", "given", "efficiency", "words"),
    [
        ("h100", None, 0.4, "prefill at 0.4 x 989 TFLOPS x 1 GPUs (calibrated on H100 prefill)"),
        (
            "A100 80GB",
            None,
            0.75,
            "prefill at 0.75 x 312 TFLOPS x 1 GPUs (calibrated on A100 80GB:",
        ),
        ("a100-40gb", None, 0.75, "(calibrated on A100 40GB: GPUStack performance-lab"),
        ("L40S", None, 0.4, "(uncalibrated on L40S: the H100's; --compute-efficiency)"),
        ("A100 80GB", 0.5, 0.5, "prefill at 0.5 x 312 TFLOPS x 1 GPUs (--compute-efficiency)"),
    ],
)
def test_the_prefill_efficiency_is_the_gpus_and_says_where_it_was_set(
    gpu: str, given: float | None, efficiency: float, words: str
) -> None:
    # the A100 reaches 0.75 of its peak in GPUStack's Qwen3-32B study; GPUs without published
    # rows run the H100's 0.4, and the flag overrides either
    d = Deployment(Engine.SGLANG, "llama-3.1-8b", gpu=gpu, mem_fraction=0.88)
    config = build_config(
        d, 512, device_tokens=100_000, timing=TimingFlags(compute_efficiency=given)
    )
    assert config.timing.compute_efficiency == efficiency
    assert words in dict(config.sources)["timing"]


def test_the_step_overhead_flag_states_the_default_the_model_applies() -> None:
    # the flag table stays free of kvtier.sim (numpy) on the plan path, so it states the number
    (row,) = (row for row in FLAGS if row.name == "--step-overhead-ms")
    assert f"default {timing.FORWARD_OVERHEAD_MS:g}," in row.spec["help"]
