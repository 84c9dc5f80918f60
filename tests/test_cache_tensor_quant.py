"""FP8 KV quantization: power-of-two page scales and the documented round-trip bound."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cache_tensor_support import gqa_geometry
from kvtier.cache import quant
from kvtier.cache.storage import Tier
from kvtier.cache.tensor_storage import KVLayout, TensorStorage

FP8 = ["fp8_e4m3", "fp8_e5m2"]

finite32 = st.floats(
    min_value=-(2.0**127), max_value=2.0**127, exclude_min=True, exclude_max=True, width=32
)


def test_bounds_are_the_half_ulp_of_each_format() -> None:
    e4m3, e5m2 = quant.storage_format("fp8_e4m3"), quant.storage_format("fp8_e5m2")
    assert (e4m3.relative_bound, e4m3.subnormal_bound) == (2**-4, 2**-10)
    assert (e5m2.relative_bound, e5m2.subnormal_bound) == (2**-3, 2**-17)
    # the format limits agree with torch's float8 types
    assert e4m3.max_value == torch.finfo(torch.float8_e4m3fn).max
    assert e5m2.max_value == torch.finfo(torch.float8_e5m2).max


@pytest.mark.parametrize("name", FP8)
def test_bound_is_reached_by_a_tie(name: str) -> None:
    fmt = quant.storage_format(name)
    # 1 + half an ULP is a tie between 1 and 1 + ULP; round-to-even goes to 1, the full half-ULP
    x = torch.tensor([1.0 + fmt.relative_bound])
    one = torch.tensor(1.0)
    err = (quant.dequantize(quant.quantize(x, one, fmt), one, fmt) - x).abs()
    assert float(err[0]) == fmt.relative_bound
    assert float(err[0]) <= float(quant.error_bound(x, one, fmt)[0])


@pytest.mark.parametrize("name", FP8)
def test_scales_are_powers_of_two_that_never_saturate(name: str) -> None:
    fmt = quant.storage_format(name)
    amax = torch.tensor([0.0, 1e-40, 1.0, fmt.max_value, fmt.max_value * 1.0001, 1e38])
    scales = quant.page_scales(amax, fmt)
    mantissa, _ = torch.frexp(scales)
    assert bool((mantissa == 0.5).all())
    assert bool((amax / scales <= fmt.max_value).all())
    # the smallest power of two that fits: half of it would overflow the format
    fits_half = amax / (scales / 2) <= fmt.max_value
    assert fits_half.tolist() == [True, True, False, False, False, False]
    assert float(scales[3]) == 1.0 and float(scales[4]) == 2.0


@pytest.mark.parametrize("name", FP8)
def test_non_finite_values_are_refused(name: str) -> None:
    fmt = quant.storage_format(name)
    for bad in (math.inf, math.nan, 2.0**127):
        with pytest.raises(ValueError, match="finite and below 2"):
            quant.page_scales(torch.tensor([1.0, bad]), fmt)


def test_unknown_dtype_is_refused() -> None:
    assert quant.storage_format("bf16").name == "bfloat16"
    with pytest.raises(ValueError, match="unknown KV cache dtype 'int3'"):
        quant.storage_format("int3")


@pytest.mark.parametrize("name", FP8)
@settings(max_examples=150, deadline=None)
@given(values=st.lists(finite32, min_size=1, max_size=64))
def test_round_trip_within_bound(name: str, values: list[float]) -> None:
    fmt = quant.storage_format(name)
    x = torch.tensor(values, dtype=torch.float32)
    scale = quant.page_scales(x.abs().amax(), fmt)
    y = quant.dequantize(quant.quantize(x, scale, fmt), scale, fmt)
    assert bool(((y - x).abs() <= quant.error_bound(x, scale, fmt)).all())


def _page_storage(name: str, page_size: int) -> TensorStorage:
    layout = KVLayout.from_geometry(gqa_geometry(1, 1, 4), page_size=page_size, dtype=name)
    return TensorStorage(layout, 2, Tier.DEVICE, device="cpu")


@pytest.mark.parametrize("name", FP8)
@settings(max_examples=60, deadline=None)
@given(
    first=st.lists(finite32, min_size=4, max_size=4),
    second=st.lists(finite32, min_size=4, max_size=4),
)
def test_a_later_write_that_raises_the_page_scale_keeps_earlier_tokens_bounded(
    name: str, first: list[float], second: list[float]
) -> None:
    fmt = quant.storage_format(name)
    storage = _page_storage(name, page_size=2)
    a = torch.tensor(first).view(1, 1, 4)
    b = torch.tensor(second).view(1, 1, 4)
    storage.write_kv(0, [2], a, -a)  # token 0 of page 1
    storage.write_kv(0, [3], b, -b)  # token 1 of page 1
    k, _ = storage.read_kv(0, [1])
    assert storage.scales is not None
    scale = storage.scales[0, 0, 1]
    assert float(scale) == float(quant.page_scales(torch.cat([a, b]).abs().amax(), fmt))
    bound_a = torch.maximum(a.abs() * fmt.relative_bound, 2 * scale * fmt.subnormal_bound)
    assert bool(((k[0] - a[0]).abs() <= bound_a[0]).all())
    assert bool(((k[1] - b[0]).abs() <= quant.error_bound(b[0], scale, fmt)).all())


@pytest.mark.parametrize("name", FP8)
def test_a_whole_page_write_starts_the_scale_afresh(name: str) -> None:
    fmt = quant.storage_format(name)
    storage = _page_storage(name, page_size=2)
    storage.write_kv(0, [0, 1], torch.full((2, 1, 4), 1000.0), torch.full((2, 1, 4), 1000.0))
    small = torch.linspace(-1e-3, 1e-3, 8).view(2, 1, 4)
    storage.write_kv(0, [0, 1], small, small)
    k, _ = storage.read_kv(0, [0])
    scale = quant.page_scales(small.abs().amax(), fmt)
    assert bool(((k - small).abs() <= quant.error_bound(small, scale, fmt)).all())
    # the stale scale (1000 / fmax rounded up) would have flushed these values to zero
    assert bool((k != 0).sum() >= 6)
