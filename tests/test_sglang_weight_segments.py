"""The weights SGLang measures: tensors in the CUDA caching allocator's segments.

Segment rules: PyTorch c10/cuda/CUDACachingAllocator.cpp (kMinBlockSize 512 B, kSmallSize 1 MiB,
kSmallBuffer 2 MiB, kLargeBuffer 20 MiB, kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB). Logged
figures: `Load weight end ... mem usage` / `avail mem` of the bundled startup logs.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.engines.sglang.weight_segments import rounding_bytes, segment_bytes
from kvtier.model.catalog import resolve_model
from kvtier.model.weights import weight_bytes
from kvtier.units import GiB, MiB


def test_a_large_tensor_gets_its_own_segment_rounded_to_2_mib() -> None:
    assert segment_bytes([10 * MiB + 1]) == 12 * MiB
    assert segment_bytes([24 * MiB]) == 24 * MiB


def test_mid_sized_tensors_share_20_mib_segments_best_fit() -> None:
    # 8 + 4 + 6 MiB fill one 20 MiB segment; a fourth 8 MiB tensor needs another
    assert segment_bytes([8 * MiB, 4 * MiB, 6 * MiB]) == 20 * MiB
    assert segment_bytes([8 * MiB, 4 * MiB, 6 * MiB, 8 * MiB]) == 40 * MiB
    # a large tensor's remainder over 1 MiB serves a later mid-sized one
    assert segment_bytes([10 * MiB + 512 * 1024, 1 * MiB + 256 * 1024]) == 12 * MiB
    # a remainder of exactly 1 MiB is not kept for the large pool
    assert segment_bytes([11 * MiB, 1 * MiB + 1]) == 12 * MiB + 20 * MiB


def test_small_tensors_share_2_mib_segments() -> None:
    assert segment_bytes([1000] * 4) == 2 * MiB  # 512-byte blocks: 4 x 1,024 B
    assert segment_bytes([1 * MiB] * 3) == 4 * MiB


@given(st.lists(st.integers(1, 64 * MiB), max_size=40))
def test_segments_hold_every_tensor(sizes: list[int]) -> None:
    reserved = segment_bytes(sizes)
    assert reserved >= sum(sizes)
    assert reserved % (2 * MiB) == 0


@pytest.mark.parametrize(
    ("model", "tp", "logged_gib"),
    [
        # S08: "Load weight end. type=Qwen3ForCausalLM ... mem usage=7.08 GB"
        ("Qwen/Qwen3-14B", 4, 7.08),
        # sglang-2025-qwq32b-l4-tp4: "avail mem=21.63 GB" before, "avail mem=6.09 GB" after
        ("Qwen/QwQ-32B", 4, 21.63 - 6.09),
        # S04: "avail mem=22.76 GB" before, "avail mem=8.37 GB" after
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 1, 22.76 - 8.37),
        # S09: "Load weight end. type=Qwen3ForCausalLM ... mem usage=1.25 GB"
        ("Qwen/Qwen3-0.6B", 1, 1.25),
    ],
)
def test_segments_bring_the_weights_to_what_sglang_logged(
    model: str, tp: int, logged_gib: float
) -> None:
    spec = resolve_model(model)
    tensors = weight_bytes(spec, tp).total_bytes / GiB
    rounding = rounding_bytes(spec, tp, 1)
    assert rounding is not None and rounding > 0
    with_segments = tensors + rounding / GiB
    # never more than the engine measured, and at least half of the gap closed
    assert with_segments <= logged_gib + 0.005
    assert logged_gib - with_segments < (logged_gib - tensors) / 2 + 0.01
    assert abs(logged_gib - with_segments) < 0.08


def test_other_layouts_are_not_guessed() -> None:
    assert rounding_bytes(resolve_model("moonshotai/Kimi-K2.5"), 8, 1) is None  # MLA + MoE
    assert rounding_bytes(resolve_model("Qwen/Qwen3-14B"), 4, 2) is None  # PP stages
