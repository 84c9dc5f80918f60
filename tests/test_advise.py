"""Options and the inverse question, on deployments whose numbers are checked by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest

from founding_support import kimi
from kvtier.engines.deployment import Deployment, Engine, FreeMemory, HiCache, Measured
from kvtier.ledger.advise import (
    HostSetup,
    OptionKind,
    all_options,
    fraction_flag,
    fraction_options,
    max_safe_fraction,
    variant,
)
from kvtier.ledger.plan import build_ledger, resolve
from kvtier.ledger.target import solve, tokens_needed
from kvtier.payload import to_json
from kvtier.report.plan_payload import option_payload
from kvtier.units import GiB

FOUNDING = kimi(
    Measured(free=FreeMemory(before_load_gib=94.04, after_load_gib=21.71, end_gib=7.90))
)


def founding():
    inputs = resolve(FOUNDING)
    return inputs, build_ledger(inputs)


def test_highest_safe_fraction_keeps_the_margin() -> None:
    """7.90 GiB free at the end (the later run's log); keeping 2 GiB leaves 5.90 GiB for KV:
    0.88 + 5.90 / 94.04 = 0.942 -> 0.94."""
    inputs, base = founding()
    assert max_safe_fraction(inputs, base, 2.0) == 0.94
    options = fraction_options(inputs, base, 2.0)
    assert [o.flags[1] for o in options] == ["0.90", "0.92", "0.94"]
    for opt in options:
        assert dict(opt.figures)["free_at_end_gib"] >= 2.0
    top = options[-1]
    assert top.kv_tokens == variant(inputs, mem_fraction=0.94).kv_tokens
    # each extra 0.01 of the fraction is 0.9404 GiB of KV: ~14,370 tokens of 70,272 B
    assert top.kv_tokens - base.kv_tokens == pytest.approx(0.06 * 94.04 * GiB / 70_272, rel=1e-3)


def test_no_headroom_says_so() -> None:
    inputs, base = founding()
    (only,) = fraction_options(inputs, base, 8.0)
    assert only.kv_tokens is None and "no room" in only.cost


def test_every_option_states_flags_and_cost() -> None:
    inputs, base = founding()
    options = all_options(inputs, base, 2.0, HostSetup(ram_available_gb=396))
    assert len({o.name for o in options}) == len(options)
    for opt in options:
        assert opt.flags and opt.cost
        assert set(to_json(option_payload(opt))) >= {"name", "flags", "kv_tokens"}


def test_host_reload_time_uses_the_shared_link() -> None:
    inputs, base = founding()
    alone = all_options(inputs, base, 2.0, HostSetup(load_tokens=32768))
    shared = all_options(inputs, base, 2.0, HostSetup(load_tokens=32768, node_gbps=100.0))

    def seconds(opts):
        return dict(next(o for o in opts if o.name == "HiCache ratio 4").figures)["load_seconds"]

    # 32,768 x 70,272 B at 64 GB/s alone, at 100/8 = 12.5 GB/s when all 8 GPUs load
    assert seconds(alone) == pytest.approx(32768 * 70272 / 64e9)
    assert seconds(shared) == pytest.approx(32768 * 70272 / 12.5e9)


def test_vllm_offload_size_is_gib_over_all_ranks() -> None:
    inputs = resolve(
        Deployment(Engine.VLLM, "Qwen/Qwen3-32B", tp=2, gpu="H100", context_length=32768)
    )
    base = build_ledger(inputs)
    offload = next(
        o for o in all_options(inputs, base, 2.0, HostSetup()) if o.name == "CPU offload x4"
    )
    size = int(offload.flags[-1])
    assert size == pytest.approx(base.kv_tokens * base.kv_bytes_per_token * 4 * 2 / GiB, abs=1)
    host_tokens = dict(offload.figures)["host_tokens"]
    assert host_tokens == pytest.approx(4 * base.kv_tokens, rel=0.01)


def test_vllm_offload_sizes_not_above_the_configured_pool_are_left_out() -> None:
    """A deployment already offloading offers only bigger host pools: x2 and x4 of the device
    pool are under its x5 (its own pool), x8 is above it."""
    d = Deployment(Engine.VLLM, "Qwen/Qwen3-32B", tp=2, gpu="H100", context_length=32768)
    base = build_ledger(resolve(d))
    size = math.ceil(base.kv_tokens * base.kv_bytes_per_token * 5 * 2 / GiB)
    offloading = dataclasses.replace(
        d, kv_offloading_backend="native", kv_offloading_size_gib=float(size)
    )
    inputs = resolve(offloading)
    names = [o.name for o in all_options(inputs, build_ledger(inputs), 2.0, HostSetup())]
    assert [n for n in names if n.startswith("CPU offload")] == ["CPU offload x8"]


def test_hicache_ratios_not_above_the_configured_pool_are_left_out() -> None:
    """SGLang at --hicache-ratio 4 is offered ratio 8 only; its --hicache-size keeps its own row."""
    d = Deployment(Engine.SGLANG, "Qwen/Qwen3-32B", tp=2, gpu="H100", context_length=32768)
    for hicache, expected in (
        (HiCache(enable=True, ratio=4.0), ["HiCache ratio 8"]),
        (HiCache(enable=True), ["HiCache ratio 4", "HiCache ratio 8"]),  # the default ratio, 2
        (HiCache(enable=True, size_gb=500.0), ["HiCache size 500 GB"]),
    ):
        inputs = resolve(dataclasses.replace(d, hicache=hicache))
        names = [o.name for o in all_options(inputs, build_ledger(inputs), 2.0, HostSetup())]
        assert [n for n in names if n.startswith("HiCache")] == expected, hicache


@pytest.mark.parametrize("engine", [Engine.SGLANG, Engine.VLLM])
def test_each_option_carries_the_kind_of_what_it_changes(engine: Engine) -> None:
    """The kind is set where the option is made: vLLM's --gpu-memory-utilization options are
    fraction options too, though their names do not say "fraction"."""
    d = Deployment(engine, "Qwen/Qwen3-32B", tp=2, gpu="H100", context_length=32768)
    inputs = resolve(d)
    base = build_ledger(inputs)
    kinds = {o.name: o.kind for o in all_options(inputs, base, 2.0, HostSetup())}
    fraction = fraction_flag(inputs)
    assert {k for n, k in kinds.items() if fraction in n} == {OptionKind.FRACTION}
    assert {k for n, k in kinds.items() if n.startswith(("HiCache", "CPU offload"))} == {
        OptionKind.HOST_TIER
    }
    assert kinds[f"page size {64 if base.page_size < 64 else base.page_size * 2}"] is (
        OptionKind.PAGE_SIZE
    )
    assert OptionKind.KV_DTYPE in kinds.values()


def test_hicache_options_size_the_host_in_the_pool_s_kv_dtype() -> None:
    # DeepSeek-V3.2 on B200s: the DSA rule stores fp8_e4m3, 43,188 B a host token; plan's host
    # pool and advise's option at the same size agree
    d = Deployment(
        Engine.SGLANG,
        "deepseek-v3.2",
        tp=8,
        gpu="B200",
        hicache=HiCache(enable=True, size_gb=100.0),
    )
    inputs = resolve(d)
    base = build_ledger(inputs)
    assert base.host_pool is not None
    option = next(
        o for o in all_options(inputs, base, 2.0, HostSetup()) if o.name == "HiCache size 100 GB"
    )
    assert dict(option.figures)["host_tokens"] == base.host_pool.tokens == 2_315_520


def test_target_picks_fp8_when_the_fraction_is_not_enough() -> None:
    inputs, base = founding()
    need = 400_000
    answer = solve(inputs, base, 2.0, need // 8192, 8192)
    assert answer.tokens_needed == tokens_needed(base, need // 8192, 8192)
    assert answer.option is not None and "--kv-cache-dtype" in answer.option.flags
    assert answer.option.kv_tokens >= answer.tokens_needed


def test_a_pool_already_in_fp8_is_offered_no_fp8_option() -> None:
    # DeepSeek-V3.1 NVFP4 (ModelOpt, kv_cache_quant_algo FP8) on vLLM 0.19: `auto` stores
    # fp8_e4m3, so --kv-cache-dtype fp8 would not double anything
    d = Deployment(Engine.VLLM, "deepseek-v3.1-nvfp4", tp=8, gpu="B200", engine_version="0.19.0")
    inputs = resolve(d)
    base = build_ledger(inputs)
    assert base.kv_bytes_per_token == (512 + 64) * 61  # one byte an element
    names = [o.name for o in all_options(inputs, base, 2.0, HostSetup())]
    assert names and not any("fp8" in n for n in names)
    # before v0.19 `auto` is bfloat16 and the option is there
    v18 = resolve(Deployment(Engine.VLLM, "deepseek-v3.1-nvfp4", tp=8, gpu="B200",
                             engine_version="0.18.0"))  # fmt: skip
    names = [o.name for o in all_options(v18, build_ledger(v18), 2.0, HostSetup())]
    assert "KV cache fp8" in names


def test_vllm_target_counts_whole_blocks() -> None:
    inputs = resolve(Deployment(Engine.VLLM, "Qwen/Qwen3-8B", gpu="H100", context_length=8192))
    base = build_ledger(inputs)
    assert tokens_needed(base, 3, 1000) == 3 * 63 * 16
