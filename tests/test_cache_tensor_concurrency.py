"""Copies in flight on the transfer worker while the scheduler thread matches, inserts, evicts.

The KV of every page is a function of its key, so any page a request finds in the cache can be
checked against what it must hold. A page freed while a batch that touches it is unfinished is
a use-after-free, caught at the free.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable, Iterator, Sequence

import pytest
import torch

from cache_tensor_support import DEVICES, gqa_geometry, one_torch_thread
from kvtier.cache import PagePool, PageStorage, Tier, TieredCache, WritePolicy, page_hashes
from kvtier.cache.request import Admission, abort, admit, finish
from kvtier.cache.tensor_storage import KVLayout, TensorStorage
from kvtier.cache.transfer import AsyncTransfer, LayerHandle

PAGE = 4
LAYOUT = KVLayout.from_geometry(gqa_geometry(layers=8, kv_heads=2, head_dim=16), page_size=PAGE)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with one_torch_thread():
        yield


class GuardedTransfer:
    """An AsyncTransfer that remembers the pages of every batch it was given."""

    def __init__(self) -> None:
        self.inner = AsyncTransfer()
        self.batches: list[tuple[LayerHandle, Tier, set[int], Tier, set[int]]] = []
        self.pending_at_submit = 0

    def submit(
        self, src: PageStorage, src_pages: Sequence[int], dst: PageStorage, dst_pages: Sequence[int]
    ) -> LayerHandle:
        handle = self.inner.submit(src, src_pages, dst, dst_pages)
        self.batches.append((handle, src.tier, set(src_pages), dst.tier, set(dst_pages)))
        self.pending_at_submit += not handle.done()
        return handle

    def busy(self, tier: Tier, pages: Iterable[int]) -> set[int]:
        """Pages of `tier` that an unfinished batch reads or writes."""
        self.batches = [b for b in self.batches if not b[0].done()]
        pages = set(pages)
        hits: set[int] = set()
        for _, src_tier, src, dst_tier, dst in self.batches:
            hits |= pages & src if src_tier is tier else set()
            hits |= pages & dst if dst_tier is tier else set()
        return hits

    def close(self) -> None:
        self.inner.close()


class GuardedPool(PagePool):  # the list pool: a cache built with page_runs=False
    """A page pool that refuses to take back a page a copy in flight still uses."""

    __slots__ = ("tier", "transfer")

    def __init__(self, capacity: int, tier: Tier, transfer: GuardedTransfer) -> None:
        super().__init__(capacity)
        self.tier = tier
        self.transfer = transfer

    def free(self, pages: Iterable[int]) -> None:
        pages = list(pages)
        busy = self.transfer.busy(self.tier, pages)
        assert not busy, f"{self.tier} pages {sorted(busy)} freed while a copy uses them"
        super().free(pages)


def _content(key: bytes) -> torch.Tensor:
    """The KV a page with this key holds: [layers, 2, page, heads, dim] bf16."""
    gen = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
    shape = (LAYOUT.num_layers, 2, PAGE, *LAYOUT.token_shape)
    return torch.randn(shape, generator=gen).to(torch.bfloat16)


def _checksum(values: torch.Tensor) -> int:
    return zlib.crc32(values.contiguous().view(torch.uint8).numpy().tobytes())


class Checker:
    """Fills new pages with their keys' KV and checks cached pages against it, per layer."""

    def __init__(self, device: TensorStorage) -> None:
        self.device = device
        self.sums: dict[tuple[bytes, int], int] = {}  # (key, layer) -> checksum
        self.pages_checked = 0

    def fill(self, keys: Sequence[bytes], pages: Sequence[int]) -> None:
        if not keys:
            return
        content = torch.stack([_content(k) for k in keys])  # [n, layers, 2, page, ...]
        slots = [p * PAGE + i for p in pages for i in range(PAGE)]
        for layer in range(LAYOUT.num_layers):
            k = content[:, layer, 0].reshape(-1, *LAYOUT.token_shape)
            v = content[:, layer, 1].reshape(-1, *LAYOUT.token_shape)
            self.device.write_kv(layer, slots, k, v)
            for key, page in zip(keys, content[:, layer], strict=True):
                self.sums[(key, layer)] = _checksum(page)

    def check(self, keys: Sequence[bytes], pages: Sequence[int], load: LayerHandle | None) -> None:
        if not keys:
            return
        for layer in range(LAYOUT.num_layers):
            if load is not None:
                load.wait_layer(layer)
            k, v = self.device.read_kv(layer, pages)
            shape = (len(pages), PAGE, *LAYOUT.token_shape)
            kv = torch.stack([k.view(shape), v.view(shape)], 1)
            for key, page in zip(keys, kv.cpu(), strict=True):
                assert _checksum(page) == self.sums[(key, layer)], f"page {key.hex()} layer {layer}"
        self.pages_checked += len(pages)


def _chats(rng: random.Random) -> Iterator[list[int]]:
    """Token sequences (whole pages) over shared system prompts, growing over turns."""
    systems = [[rng.randrange(1000) for _ in range(PAGE * rng.randint(2, 4))] for _ in range(5)]
    chats: list[list[int]] = []
    while True:
        if chats and rng.random() < 0.5:
            i = rng.randrange(len(chats))
            if len(chats[i]) < PAGE * 10:
                chats[i] = chats[i] + [rng.randrange(1000) for _ in range(PAGE * rng.randint(1, 2))]
            yield chats[i]
        else:
            user = [rng.randrange(1000) for _ in range(PAGE * rng.randint(1, 3))]
            chats.append(rng.choice(systems) + user)
            yield chats[-1]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("policy", list(WritePolicy))
def test_copies_in_flight_never_corrupt_or_outlive_their_pages(device: str, policy: str) -> None:
    rng = random.Random(f"{policy}-{device}")
    transfer = GuardedTransfer()
    dev = TensorStorage(LAYOUT, 28, Tier.DEVICE, device=device)
    host = TensorStorage(LAYOUT, 56, Tier.HOST)
    cache = TieredCache(dev, host, transfer, write_policy=policy, page_runs=False)  # type: ignore[arg-type]
    cache.device_pool = GuardedPool(dev.num_pages, Tier.DEVICE, transfer)
    cache.host_pool = GuardedPool(host.num_pages, Tier.HOST, transfer)
    checker = Checker(dev)
    running: list[Admission] = []
    chats = _chats(rng)
    try:
        # at least 700 steps, and more until the run has moved pages both ways with copies in
        # flight: how many copies overlap depends on thread timing, not on the seed
        for step in range(4000):
            if step >= 700 and _exercised(cache, transfer, checker):
                break
            action = rng.random()
            if action < 0.5 and len(running) < 3:
                keys = page_hashes(next(chats), PAGE)
                adm = admit(cache, keys)
                if adm is None:
                    continue
                load = adm.load.handle if adm.load is not None else None
                assert load is None or isinstance(load, LayerHandle)
                checker.check(keys[: adm.num_cached], adm.pages[: adm.num_cached], load)
                checker.fill(keys[adm.num_cached :], adm.pages[adm.num_cached :])
                running.append(adm)
            elif action < 0.85 and running:
                adm = running.pop(rng.randrange(len(running)))
                if rng.random() < 0.1:
                    abort(cache, adm)
                else:
                    finish(cache, adm)
            else:
                cache.evict(rng.choice([Tier.DEVICE, Tier.HOST]), rng.randint(1, 12))
            cache.poll()
            if step % 25 == 0:
                held = [p for a in running for p in a.pages[a.num_cached :]]
                cache.check_integrity(held)
        for adm in running:
            finish(cache, adm)
        cache.flush()
        cache.check_integrity([])
    finally:
        transfer.close()
    # the run really moved pages both ways with copies still in flight, and checked its hits
    assert _exercised(cache, transfer, checker), (cache.counters(), transfer.pending_at_submit)


def _exercised(cache: TieredCache, transfer: GuardedTransfer, checker: Checker) -> bool:
    counters = cache.counters()
    return (
        counters.written_to_host > 20
        and counters.loaded_from_host > 20
        and transfer.pending_at_submit > 50
        and checker.pages_checked > 200
    )
