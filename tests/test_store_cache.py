"""The store as the tiered cache's L3: device -> host -> store -> host -> device is bit-exact,
through the disk store and through Redis, and a second cache (a restarted process) finds the
prefix the first one left in the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store_support import FP, needs_redis, running_redis

torch = pytest.importorskip("torch")

from kvtier.cache import quant  # noqa: E402
from kvtier.cache.hierarchy import TieredCache  # noqa: E402
from kvtier.cache.keys import page_hashes  # noqa: E402
from kvtier.cache.storage import Tier  # noqa: E402
from kvtier.cache.tensor_storage import KVLayout, TensorStorage  # noqa: E402
from kvtier.model.description import AttentionKind  # noqa: E402
from kvtier.store import open_store  # noqa: E402
from kvtier.store.hook import StoreHook  # noqa: E402

PAGE = 4
PAGES = 6
LAYERS = 3


@pytest.fixture(params=["disk", pytest.param("redis", marks=[needs_redis, pytest.mark.redis])])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "disk":
        yield str(tmp_path / "store")
    else:
        with running_redis(tmp_path) as srv:
            yield srv.url


def _cache(layout: KVLayout, url: str) -> tuple[TieredCache, TensorStorage]:
    device = TensorStorage(layout, PAGES + 2, Tier.DEVICE, device="cpu")
    host = TensorStorage(layout, PAGES + 2, Tier.HOST, device="cpu")
    return TieredCache(device, host, store=StoreHook(open_store(url, FP))), device


def _layout(kind: AttentionKind, kv_dtype: str) -> KVLayout:
    heads = 1 if kind is AttentionKind.MLA else 2
    return KVLayout(kind, LAYERS, PAGE, heads, 8, quant.storage_format(kv_dtype))


def _fill(device: TensorStorage, pages: list[int], seed: int) -> None:
    """Random KV (or MLA latents) in every token of `pages`."""
    gen = torch.Generator().manual_seed(seed)
    slots = [p * PAGE + t for p in pages for t in range(PAGE)]
    shape = (len(slots), *device.layout.token_shape)
    for layer in range(LAYERS):
        k, v = ((torch.randn(shape, generator=gen) * 3).to(torch.bfloat16) for _ in range(2))
        if device.layout.kind is AttentionKind.MLA:
            device.write_latent(layer, slots, k)
        else:
            device.write_kv(layer, slots, k, v)


@pytest.mark.parametrize(
    ("kind", "kv_dtype"),
    [
        (AttentionKind.MHA, "bfloat16"),
        (AttentionKind.MHA, "fp8_e4m3"),
        (AttentionKind.MLA, "bfloat16"),
        (AttentionKind.MLA, "fp8_e5m2"),
    ],
)
def test_round_trip_through_the_store_is_bit_exact(
    store_url: str, kind: AttentionKind, kv_dtype: str
) -> None:
    layout = _layout(kind, kv_dtype)
    keys = page_hashes(list(range(1000, 1000 + PAGES * PAGE)), PAGE)

    cache, device = _cache(layout, store_url)
    pages = cache.alloc_device(PAGES)
    assert pages is not None
    _fill(device, pages, seed=0)
    cache.insert(keys, pages)  # write_through: backed up to the host at once
    cache.flush()
    original = device.read_page_bytes(pages)
    before = [device.data[layer].clone() for layer in range(LAYERS)]

    assert cache.evict(Tier.DEVICE, PAGES).freed == PAGES
    assert cache.evict(Tier.HOST, PAGES).written == PAGES  # host eviction writes to the store
    assert cache.match_prefix(keys).num_store_pages == PAGES

    # a fresh cache, as another process would build it, over the same store
    fresh, fresh_device = _cache(layout, store_url)
    match = fresh.match_prefix(keys)
    assert (match.num_device_pages, match.num_host_pages, match.num_store_pages) == (0, 0, PAGES)
    match = fresh.fetch_from_store(keys, match)
    assert (match.num_host_pages, match.num_store_pages) == (PAGES, 0)
    load = fresh.load_back(match)
    assert load is not None
    load.wait()
    fresh.poll()
    assert fresh.counters().loaded_from_store == PAGES
    assert fresh_device.read_page_bytes(load.device_pages) == original
    # the same bits in the fresh device tensor, page for page (page axis: 0 for MLA, 1 for K/V)
    axis = 0 if kind is AttentionKind.MLA else 1
    src, dst = torch.tensor(pages), torch.tensor(load.device_pages)
    for layer in range(LAYERS):
        old = before[layer].index_select(axis, src).view(torch.uint8)
        new = fresh_device.data[layer].index_select(axis, dst).view(torch.uint8)
        assert torch.equal(old, new)


def test_a_damaged_store_page_ends_the_fetched_prefix(tmp_path: Path) -> None:
    layout = _layout(AttentionKind.MHA, "bfloat16")
    keys = page_hashes(list(range(PAGES * PAGE)), PAGE)
    url = str(tmp_path / "store")
    cache, _ = _cache(layout, url)
    pages = cache.alloc_device(PAGES)
    assert pages is not None
    cache.insert(keys, pages)
    cache.evict(Tier.DEVICE, PAGES)
    cache.evict(Tier.HOST, PAGES)

    store = open_store(url, FP)
    path = store.inner.path_of(keys[3])  # type: ignore[attr-defined]
    path.write_bytes(path.read_bytes()[:-7])

    fresh, _ = _cache(layout, url)
    match = fresh.match_prefix(keys)
    assert match.num_store_pages == 3  # the probe checks each page's header and size
    match = fresh.fetch_from_store(keys, match)
    assert match.num_host_pages == 3  # pages 0-2 only; the torn page is dropped, never served
    assert not path.exists()
    assert fresh.store.store.stats().corrupt == 1  # type: ignore[union-attr]
