"""Tensor storage: layouts sized from model geometry, bit-exact page moves and (de)serialization."""

from __future__ import annotations

import subprocess
import sys
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cache_tensor_support import (
    DEVICES,
    fill_random_bits,
    gqa_geometry,
    mla_geometry,
    tiers,
)
from kvtier.cache import page_copy, quant
from kvtier.cache.page_copy import PageCopy
from kvtier.cache.storage import AccountingStorage, PageStorage, Tier
from kvtier.cache.tensor_storage import KVLayout, TensorStorage
from kvtier.errors import UnsupportedModel
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind

LLAMA_31_8B = KVGeometry(AttentionKind.MHA, 8, 128, 128, (LayerKind.FULL,) * 32)
KIMI_K25 = KVGeometry(
    AttentionKind.MLA, 1, 576, 0, (LayerKind.FULL,) * 61, kv_lora_rank=512, qk_rope_head_dim=64
)
DTYPES = ["bfloat16", "float16", "float32", "fp8_e4m3", "fp8_e5m2"]


def test_llama_page_is_2_mib_and_matches_sglang_host_size_per_token() -> None:
    layout = KVLayout.from_geometry(LLAMA_31_8B, page_size=16)
    # HostKVCache.get_size_per_token (MHA): head_dim * head_num * layer_num * itemsize * 2
    assert layout.page_nbytes == 16 * 128 * 8 * 32 * 2 * 2 == 2 * 1024 * 1024
    assert TensorStorage(layout, 1, Tier.HOST).data.shape == (32, 2, 1, 16, 8, 128)


def test_fp8_page_is_half_the_bytes_plus_one_scale_per_layer_and_part() -> None:
    layout = KVLayout.from_geometry(LLAMA_31_8B, page_size=16, dtype="fp8_e4m3")
    assert layout.page_nbytes == 1024 * 1024 + 32 * 2 * 4
    storage = TensorStorage(layout, 3, Tier.HOST)
    assert storage.data.dtype == torch.uint8
    assert storage.scales is not None and storage.scales.shape == (32, 2, 3)


def test_kimi_mla_token_is_70272_bytes_on_every_rank() -> None:
    # (kv_lora_rank + qk_rope_head_dim) * layers * 2 bytes, not split by tensor parallelism
    for tp in (1, 8):
        layout = KVLayout.from_geometry(KIMI_K25, page_size=64, tp=tp)
        assert layout.page_nbytes == 64 * 70_272
    assert TensorStorage(layout, 2, Tier.HOST).data.shape == (61, 2, 64, 576)


def test_heads_are_split_by_tp_and_replicated_beyond_the_head_count() -> None:
    heads = [
        KVLayout.from_geometry(LLAMA_31_8B, page_size=16, tp=tp).num_kv_heads
        for tp in (1, 2, 8, 16)
    ]
    assert heads == [8, 4, 1, 1]


def test_unequal_k_and_v_head_dims_are_refused() -> None:
    geometry = KVGeometry(AttentionKind.MHA, 8, 192, 128, (LayerKind.FULL,) * 2)
    with pytest.raises(UnsupportedModel, match="equal K and V head dims"):
        KVLayout.from_geometry(geometry, page_size=16)


def test_the_store_tier_is_not_a_tensor_storage() -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4)
    with pytest.raises(ValueError, match="L3"):
        TensorStorage(layout, 4, Tier.STORE)


def _layouts() -> list[KVLayout]:
    return [
        KVLayout.from_geometry(g, page_size=4, dtype=d)
        for g in (gqa_geometry(), mla_geometry())
        for d in DTYPES
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", _layouts(), ids=lambda x: f"{x.kind}-{x.dtype.name}")
def test_copy_pages_moves_exact_bytes_and_nothing_else(device: str, layout: KVLayout) -> None:
    dev, host = tiers(layout, device)
    fill_random_bits(dev, seed=1)
    fill_random_bits(host, seed=2)
    assert isinstance(dev, PageStorage)
    before = host.read_page_bytes(range(host.num_pages))
    dev.copy_pages([3, 0, 5], host, [10, 2, 7])
    after = host.read_page_bytes(range(host.num_pages))
    assert [after[p] for p in (10, 2, 7)] == dev.read_page_bytes([3, 0, 5])
    untouched = [p for p in range(host.num_pages) if p not in (10, 2, 7)]
    assert [after[p] for p in untouched] == [before[p] for p in untouched]
    # and back onto other device pages
    host.copy_pages([10, 2, 7], dev, [6, 7, 1])
    assert dev.read_page_bytes([6, 7, 1]) == dev.read_page_bytes([3, 0, 5])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", _layouts(), ids=lambda x: f"{x.kind}-{x.dtype.name}")
def test_page_bytes_round_trip_bit_exact(device: str, layout: KVLayout) -> None:
    dev, host = tiers(layout, device)
    fill_random_bits(host, seed=3)
    blobs = host.read_page_bytes([4, 9])
    assert all(len(b) == 12 + layout.page_nbytes for b in blobs)
    dev.write_page_bytes([2, 5], blobs)
    assert dev.read_page_bytes([2, 5]) == blobs
    for layer in range(layout.num_layers):
        assert torch.equal(
            dev.data[layer].cpu().view(torch.uint8).select(dev._page_dim, 5),
            host.data[layer].view(torch.uint8).select(host._page_dim, 9),
        )


def test_blobs_of_another_layout_are_refused() -> None:
    bf16 = TensorStorage(KVLayout.from_geometry(gqa_geometry(), page_size=4), 2, Tier.HOST)
    fp16 = TensorStorage(
        KVLayout.from_geometry(gqa_geometry(), page_size=4, dtype="float16"), 2, Tier.HOST
    )
    blob = bf16.read_page_bytes([0])[0]
    assert len(blob) == len(fp16.read_page_bytes([0])[0])
    with pytest.raises(ValueError, match="this KV layout"):
        fp16.write_page_bytes([1], [blob])
    with pytest.raises(ValueError, match="this KV layout"):
        bf16.write_page_bytes([1], [blob[:-1]])


def test_bad_indices_and_mismatched_storages_are_refused() -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4)
    dev, host = tiers(layout, "cpu")
    with pytest.raises(ValueError, match="out of range"):
        dev.copy_pages([8], host, [0])
    with pytest.raises(ValueError, match="repeat"):
        dev.copy_pages([0, 1], host, [3, 3])
    with pytest.raises(ValueError, match="counts differ"):
        dev.copy_pages([0, 1], host, [3])
    with pytest.raises(ValueError, match="same KV layout"):
        dev.copy_pages([0], AccountingStorage(Tier.HOST, 4), [0])
    other = TensorStorage(KVLayout.from_geometry(gqa_geometry(layers=2), page_size=4), 4, Tier.HOST)
    with pytest.raises(ValueError, match="same KV layout"):
        dev.copy_pages([0], other, [0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_write_kv_then_read_kv_returns_the_stored_values(device: str, dtype: str) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4, dtype=dtype)
    storage = TensorStorage(layout, 8, Tier.DEVICE, device=device)
    torch.manual_seed(0)
    k, v = torch.randn(8, 4, 16), torch.randn(8, 4, 16)
    slots = [13, 12, 14, 15, 4, 5, 6, 7]  # pages 3 and 1, out of order within page 3
    storage.write_kv(1, slots, k, v)
    rk, rv = storage.read_kv(1, [3, 1])
    order = [1, 0, 2, 3, 4, 5, 6, 7]
    torch_dtype = layout.dtype.storage_dtype()
    assert rk.dtype == torch_dtype
    assert torch.equal(rk.cpu(), k[order].to(torch_dtype))
    assert torch.equal(rv.cpu(), v[order].to(torch_dtype))
    assert not bool(storage.read_kv(0, [3])[0].any())  # another layer is untouched


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_write_read_within_bound(device: str, dtype: str) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4, dtype=dtype)
    storage = TensorStorage(layout, 8, Tier.DEVICE, device=device)
    torch.manual_seed(1)
    # pages with very different magnitudes: a per-tensor scale could not serve both
    k = torch.cat([torch.randn(4, 4, 16) * 1e-3, torch.randn(4, 4, 16) * 1e3])
    v = torch.randn(8, 4, 16)
    storage.write_kv(2, list(range(8)), k, v)
    rk, rv = storage.read_kv(2, [0, 1])
    assert rk.dtype == torch.float32
    assert storage.scales is not None
    fmt = layout.dtype
    for got, want, part in ((rk, k, 0), (rv, v, 1)):
        scale = storage.scales[2, part, :2].cpu().repeat_interleave(4).view(8, 1, 1)
        assert bool(((got.cpu() - want).abs() <= quant.error_bound(want, scale, fmt)).all())
        assert not torch.equal(got.cpu(), want)  # it really is quantized


def test_mla_latent_round_trip() -> None:
    layout = KVLayout.from_geometry(mla_geometry(), page_size=4)
    storage = TensorStorage(layout, 4, Tier.DEVICE, device="cpu")
    latent = torch.randn(8, 40)
    storage.write_latent(0, list(range(4, 12)), latent)
    assert torch.equal(storage.read_latent(0, [1, 2]), latent.to(torch.bfloat16))
    with pytest.raises(ValueError, match="mla cache"):
        storage.write_kv(0, [0], latent[:1], latent[:1])


def test_wrong_value_shapes_are_refused() -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4)
    storage = TensorStorage(layout, 4, Tier.DEVICE, device="cpu")
    with pytest.raises(ValueError, match="expected values of shape"):
        storage.write_kv(0, [0, 1], torch.zeros(2, 4, 8), torch.zeros(2, 4, 8))
    with pytest.raises(ValueError, match="layer 3 out of range"):
        storage.read_kv(3, [0])


def test_importing_the_cache_does_not_import_torch() -> None:
    code = (
        "import sys, kvtier.cache, kvtier.cache.tensor_storage, kvtier.cache.transfer, "
        "kvtier.cache.quant; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _segment_kinds(copy: PageCopy) -> list[str]:
    return [type(segment).__name__.strip("_") for segment in copy.segments]


@pytest.mark.parametrize(
    ("src_pages", "dst_pages", "kinds"),
    [
        ([2, 1, 0], [5, 4, 3], ["Slice"]),  # as a fresh pool hands them out: one run
        ([9, 3, 14, 6], [4, 5, 6, 7], ["Gather"]),  # neighbours in the destination
        ([4, 5, 6, 7], [9, 3, 14, 6], ["Scatter"]),  # neighbours in the source
        ([9, 3, 14, 6], [1, 12, 7, 2], ["Buffered"]),  # neighbours nowhere
        ([0, 1, 2, 9, 3], [4, 5, 6, 11, 0], ["Slice", "Buffered"]),  # a run, and a stray pair
    ],
)
def test_a_batch_is_cut_into_runs_along_the_side_with_fewer(
    src_pages: list[int], dst_pages: list[int], kinds: list[str]
) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4)
    src, dst = TensorStorage(layout, 16, Tier.DEVICE), TensorStorage(layout, 16, Tier.HOST)
    row_bytes = layout.page_nbytes // layout.num_layers
    with mock.patch.object(page_copy, "_MIN_RUN_BYTES", 3 * row_bytes):
        assert _segment_kinds(src.plan_copy(src_pages, dst, dst_pages)) == kinds


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_batch_moves_exactly_its_pages(data: st.DataObject) -> None:
    """Whatever the placement and however it is cut (runs of any length, small buffers), each
    destination page ends up with its source page's bytes and no other page changes."""
    kind = data.draw(st.sampled_from(["mha-bf16", "mla-bf16", "mha-fp8", "mla-fp8"]))
    geometry = gqa_geometry(layers=3) if kind.startswith("mha") else mla_geometry(layers=3)
    dtype = "fp8_e4m3" if kind.endswith("fp8") else "bfloat16"
    layout = KVLayout.from_geometry(geometry, page_size=2, dtype=dtype)
    row_bytes = layout.page_nbytes // layout.num_layers
    src = TensorStorage(layout, data.draw(st.integers(1, 24)), Tier.DEVICE)
    dst = TensorStorage(layout, data.draw(st.integers(1, 24)), Tier.HOST)
    n = data.draw(st.integers(0, min(src.num_pages, dst.num_pages)))
    src_pages = data.draw(st.permutations(range(src.num_pages)))[:n]
    dst_pages = data.draw(st.permutations(range(dst.num_pages)))[:n]
    if data.draw(st.booleans()):  # neighbours, as an allocator hands them out
        dst_pages = sorted(dst_pages)
    fill_random_bits(src, seed=data.draw(st.integers(0, 9)))
    fill_random_bits(dst, seed=10)
    before = dst.read_page_bytes(range(dst.num_pages))
    min_run = data.draw(st.integers(1, 5))
    buffer_rows = data.draw(st.integers(1, 7))
    with (
        mock.patch.object(page_copy, "_MIN_RUN_BYTES", min_run * row_bytes),
        mock.patch.object(page_copy, "_BUFFER_BYTES", buffer_rows * row_bytes // layout.parts),
    ):
        copy = src.plan_copy(src_pages, dst, dst_pages)
    layers_at_once = data.draw(st.integers(1, layout.num_layers))  # as the transfer worker runs it
    for first in range(0, layout.num_layers, layers_at_once):
        copy.copy_layers(first, min(first + layers_at_once, layout.num_layers))
    after = dst.read_page_bytes(range(dst.num_pages))
    moved = dict(zip(dst_pages, src.read_page_bytes(src_pages), strict=True))
    assert after == [moved.get(p, before[p]) for p in range(dst.num_pages)]


def test_overlapping_copy_within_one_storage_reads_before_it_writes() -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4)
    storage = TensorStorage(layout, 4, Tier.HOST)
    fill_random_bits(storage, seed=4)
    before = storage.read_page_bytes([0, 1])
    storage.copy_pages([0, 1], storage, [1, 2])
    assert storage.read_page_bytes([1, 2]) == before
