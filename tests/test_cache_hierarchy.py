"""Tiers: write policies, host eviction, load-back, copies in flight, the L3 store hook."""

from __future__ import annotations

import pytest

from cache_support import DictStore, ManualTransfer, TaggedStorage, check_tags
from kvtier.cache import (
    AccountingStorage,
    PageStoreHook,
    Tier,
    TieredCache,
    WritePolicy,
    abort,
    admit,
    finish,
    page_hashes,
)

KEYS = page_hashes(list(range(8)), 1)


def _cache(
    device: int = 8,
    host: int = 16,
    policy: WritePolicy = WritePolicy.WRITE_THROUGH,
    transfer: ManualTransfer | None = None,
    store: DictStore | None = None,
) -> TieredCache:
    return TieredCache(
        TaggedStorage(Tier.DEVICE, device),
        TaggedStorage(Tier.HOST, host) if host else None,
        transfer,
        write_policy=policy,
        store=store,
    )


def _put(cache: TieredCache, keys: list[bytes]) -> None:
    pages = cache.alloc_device(len(keys))
    assert pages is not None
    cache.device.fill(pages, keys)  # type: ignore[attr-defined]
    result = cache.insert(keys, pages)
    cache.free_device(pages[: result.prefix_len])


def test_write_through_backs_up_on_insert_and_eviction_keeps_the_host_copy() -> None:
    cache = _cache()
    _put(cache, KEYS[:4])
    assert cache.size_info().host.total == 4
    assert cache.evict(Tier.DEVICE, 4) == (4, 0)
    match = cache.match_prefix(KEYS[:4])
    assert (match.num_device_pages, match.num_host_pages) == (0, 4)
    check_tags(cache)
    load = cache.load_back(match)
    assert load is not None and load.num_loaded == 4 and len(load.device_pages) == 4
    check_tags(cache)
    assert cache.counters().loaded_from_host == 4
    cache.check_integrity([])


def test_write_through_selective_waits_for_the_second_hit() -> None:
    cache = _cache(policy=WritePolicy.WRITE_THROUGH_SELECTIVE)
    _put(cache, KEYS[:3])
    assert cache.size_info().host.total == 0
    _put(cache, KEYS[:2])  # a second request through the first two pages
    assert cache.size_info().host.total == 2
    assert cache.write_threshold == 2


def test_write_back_copies_only_when_evicting() -> None:
    cache = _cache(policy=WritePolicy.WRITE_BACK)
    _put(cache, KEYS[:3])
    assert cache.size_info().host.total == 0
    assert cache.evict(Tier.DEVICE, 3) == (3, 3)
    assert cache.match_prefix(KEYS[:3]).num_host_pages == 3
    assert cache.counters().written_to_host == 3
    check_tags(cache)
    cache.check_integrity([])


def test_device_only_node_is_dropped_with_its_host_only_subtree() -> None:
    store = DictStore()
    store.save(KEYS[2:4], KEYS[2:4])  # left by an earlier run
    cache = _cache(policy=WritePolicy.WRITE_THROUGH_SELECTIVE, store=store)
    _put(cache, KEYS[:2])  # one hit: no host copy
    match = cache.fetch_from_store(KEYS[:4], cache.match_prefix(KEYS[:4]))
    assert (match.num_device_pages, match.num_host_pages) == (2, 2)
    assert cache.evict(Tier.DEVICE, 1).freed == 2
    assert not cache.tree.root.children
    assert cache.host_pool.num_free == cache.host_pool.capacity
    assert cache.counters().host_evicted == 2
    cache.check_integrity([])


def test_host_eviction_drops_host_only_leaves_and_hands_them_to_the_store() -> None:
    store = DictStore()
    assert isinstance(store, PageStoreHook)
    cache = _cache(device=4, host=4, store=store)
    _put(cache, KEYS[:4])
    cache.evict(Tier.DEVICE, 4)
    assert cache.evict(Tier.HOST, 4) == (4, 4)
    assert not cache.tree.root.children and set(store.blobs) == set(KEYS[:4])
    match = cache.match_prefix(KEYS[:6])
    assert match.num_store_pages == 4
    match = cache.fetch_from_store(KEYS[:6], match)
    assert (match.num_host_pages, match.num_store_pages) == (4, 0)
    check_tags(cache)
    load = cache.load_back(match)
    assert load is not None
    check_tags(cache)
    counters = cache.counters()
    assert (counters.saved_to_store, counters.loaded_from_store) == (4, 4)
    cache.check_integrity([])


def test_a_store_needs_a_host_tier() -> None:
    with pytest.raises(ValueError, match="host tier"):
        TieredCache(AccountingStorage(Tier.DEVICE, 4), store=DictStore())


def test_pages_being_written_are_pinned_until_poll_sees_the_copy() -> None:
    transfer = ManualTransfer()
    cache = _cache(transfer=transfer)
    _put(cache, KEYS[:3])
    assert cache.copies_in_flight == 1
    assert cache.size_info().device.protected == 3
    assert cache.evict(Tier.DEVICE, 3).freed == 0
    cache.check_integrity([])
    transfer.complete(1)
    assert cache.size_info().device.protected == 3, "still pinned until poll"
    assert cache.poll() == 1
    assert cache.size_info().device.protected == 0
    check_tags(cache)
    assert cache.evict(Tier.DEVICE, 3).freed == 3


def test_load_back_pins_the_loaded_pages_until_the_copy_lands() -> None:
    transfer = ManualTransfer()
    cache = _cache(transfer=transfer)
    _put(cache, KEYS[:4])
    cache.flush()
    cache.evict(Tier.DEVICE, 4)
    load = cache.load_back(cache.match_prefix(KEYS[:4]))
    assert load is not None and not load.done()
    assert cache.evict(Tier.DEVICE, 4).freed == 0
    assert cache.evict(Tier.HOST, 4).freed == 0
    load.wait()
    cache.poll()
    check_tags(cache)
    assert cache.evict(Tier.DEVICE, 4).freed == 4


def test_load_back_is_all_or_nothing() -> None:
    cache = _cache(device=4, host=8)
    _put(cache, KEYS[:4])
    cache.evict(Tier.DEVICE, 4)
    held = cache.alloc_device(1)
    assert held is not None
    match = cache.match_prefix(KEYS[:4])
    assert cache.load_back(match) is None
    assert cache.num_free_device_pages == 3
    assert cache.match_prefix(KEYS[:4]).num_host_pages == 4
    cache.check_integrity(held)


def test_load_back_of_a_stale_match_is_refused() -> None:
    cache = _cache()
    _put(cache, KEYS[:2])
    cache.evict(Tier.DEVICE, 2)
    match = cache.match_prefix(KEYS[:2])
    assert cache.load_back(match) is not None
    with pytest.raises(ValueError, match="stale"):
        cache.load_back(match)


def test_requests_share_a_prefix_and_the_second_frees_its_duplicates() -> None:
    cache = _cache(device=12, host=0)
    first = admit(cache, KEYS[:4], extra_pages=1)
    second = admit(cache, KEYS[:4])
    assert first is not None and second is not None
    assert (first.num_cached, second.num_cached) == (0, 0)
    assert finish(cache, first) == 0
    assert cache.num_free_device_pages == 12 - 4 - 4  # first's extra page came back
    assert finish(cache, second) == 4
    assert cache.num_free_device_pages == 8
    third = admit(cache, KEYS[:6])
    assert third is not None and (third.num_cached, third.device_hit) == (4, 4)
    assert cache.size_info().device.protected == 4
    abort(cache, third)
    assert cache.size_info().device.protected == 0 and cache.num_free_device_pages == 8
    cache.check_integrity([])


def test_admission_loads_the_host_part_back_and_counts_hits_by_tier() -> None:
    cache = _cache(device=6, host=8)
    _put(cache, KEYS[:4])
    cache.evict(Tier.DEVICE, 2)  # the leaf [0:4] as a whole: all four go to the host
    adm = admit(cache, KEYS[:5])
    assert adm is not None
    assert (adm.device_hit, adm.host_hit, adm.store_hit, adm.num_cached) == (0, 4, 0, 4)
    cache.check_integrity(adm.pages[4:])


def test_admission_that_cannot_fit_leaves_nothing_locked() -> None:
    cache = _cache(device=4, host=0)
    _put(cache, KEYS[:2])
    assert admit(cache, KEYS[:2] + page_hashes([9, 9, 9], 1, KEYS[1])) is None
    assert cache.size_info().device.protected == 0
    cache.check_integrity([])


def test_refused_admission_loads_nothing_back_and_takes_a_given_match() -> None:
    cache = _cache(device=4, host=8)
    _put(cache, KEYS[:4])
    cache.evict(Tier.DEVICE, 4)  # all four now live on the host only
    keys = KEYS[:4] + page_hashes([9], 1, KEYS[3])
    match = cache.match_prefix(keys)
    assert (match.num_device_pages, match.num_host_pages) == (0, 4)
    # four to load back, one new page and one output page: 6 > 4 device pages
    assert admit(cache, keys, 1, match) is None
    assert cache.counters().loaded_from_host == 0, "a refused admission loaded pages back"
    assert cache.num_free_device_pages == 4 and cache.size_info().device.total == 0
    cache.check_integrity([])
    adm = admit(cache, KEYS[:4], 0, cache.match_prefix(KEYS[:4]))
    assert adm is not None and (adm.host_hit, adm.num_cached) == (4, 4)
    assert cache.counters().loaded_from_host == 4
    cache.check_integrity(adm.pages[4:])
