"""Radix tree operations on one tier: match, insert, split, locks, eviction order."""

from __future__ import annotations

import subprocess
import sys
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.cache import (
    AccountingStorage,
    EvictionPolicy,
    RadixTree,
    Tier,
    TieredCache,
    page_keys,
)


def _cache(pages: int = 16, eviction: str = "lru") -> TieredCache:
    return TieredCache(AccountingStorage(Tier.DEVICE, pages), eviction=eviction)


def _put(cache: TieredCache, keys: list[int]) -> list[int]:
    """Insert keys with fresh pages; returns the pages now caching them."""
    pages = cache.alloc_device(len(keys))
    assert pages is not None
    result = cache.insert(keys, pages)
    cache.free_device(pages[: result.prefix_len])
    return cache.match_prefix(keys).device_pages


def test_empty_tree_matches_nothing() -> None:
    cache = _cache()
    match = cache.match_prefix([1, 2, 3])
    assert match.device_pages == [] and match.num_host_pages == 0
    assert match.last_node is cache.tree.root is match.last_device_node


def test_match_returns_the_inserted_pages_in_order_and_splits_inside_a_node() -> None:
    cache = _cache()
    pages = _put(cache, [1, 2, 3, 4])
    match = cache.match_prefix([1, 2, 9])
    assert match.device_pages == pages[:2]
    assert match.last_node.keys == [1, 2]
    assert [n.keys for n in cache.tree.nodes()] == [[1, 2], [3, 4]]
    cache.check_integrity([])


def test_insert_reports_leading_duplicates() -> None:
    cache = _cache()
    _put(cache, [1, 2, 3])
    pages = cache.alloc_device(3)
    assert pages is not None
    result = cache.insert([1, 2, 5], pages)
    assert result.prefix_len == 2
    assert result.last_node.keys == [5] and result.last_node.device == pages[2:]
    cache.free_device(pages[:2])
    cache.check_integrity([])
    assert cache.size_info().device.total == 4


def test_insert_needs_one_page_per_key() -> None:
    with pytest.raises(ValueError, match="keys but"):
        _cache().insert([1, 2], [0])


def test_lock_moves_the_whole_path_from_evictable_to_protected() -> None:
    cache = _cache()
    _put(cache, [1, 2, 3])
    _put(cache, [1, 2, 4, 5])
    leaf = cache.match_prefix([1, 2, 4, 5]).last_node
    cache.lock(leaf)
    sizes = cache.size_info().device
    assert (sizes.protected, sizes.evictable) == (4, 1)  # [1,2] + [4,5] locked, [3] not
    cache.lock(leaf)
    cache.unlock(leaf)
    assert cache.size_info().device.protected == 4
    cache.unlock(leaf)
    assert cache.size_info().device.protected == 0
    with pytest.raises(ValueError, match="without a matching lock"):
        cache.unlock(leaf)


def test_lru_evicts_the_least_recently_matched_leaf_first() -> None:
    cache = _cache()
    _put(cache, [1])
    _put(cache, [2])
    _put(cache, [3])
    cache.match_prefix([1])
    assert cache.evict(Tier.DEVICE, 1).freed == 1
    assert cache.match_prefix([2]).device_pages == []
    assert len(cache.match_prefix([1]).device_pages) == 1
    assert len(cache.match_prefix([3]).device_pages) == 1


def test_lfu_evicts_the_least_inserted_leaf_first() -> None:
    cache = _cache(eviction="lfu")
    for _ in range(3):
        _put(cache, [1])
    _put(cache, [2])
    _put(cache, [3])
    _put(cache, [3])
    cache.evict(Tier.DEVICE, 1)
    assert cache.match_prefix([2]).device_pages == []
    assert cache.match_prefix([1]).device_pages and cache.match_prefix([3]).device_pages


def test_fifo_ignores_later_use() -> None:
    cache = _cache(eviction="fifo")
    _put(cache, [1])
    _put(cache, [2])
    cache.match_prefix([1])
    _put(cache, [1])
    cache.evict(Tier.DEVICE, 1)
    assert cache.match_prefix([1]).device_pages == []
    assert cache.match_prefix([2]).device_pages


def test_a_parent_is_evicted_only_after_its_last_child() -> None:
    cache = _cache()
    _put(cache, [1, 2])
    _put(cache, [1, 2, 3])
    _put(cache, [1, 2, 4])
    cache.match_prefix([1, 2])  # the parent is the most recent, yet it must go last
    assert cache.evict(Tier.DEVICE, 2).freed == 2
    assert len(cache.match_prefix([1, 2]).device_pages) == 2
    assert cache.evict(Tier.DEVICE, 2).freed == 2
    assert not cache.tree.root.children
    assert cache.num_free_device_pages == 16
    cache.check_integrity([])


def test_locked_leaves_are_skipped() -> None:
    cache = _cache()
    _put(cache, [1, 1])
    _put(cache, [2, 2])
    node = cache.match_prefix([1, 1]).last_node
    cache.lock(node)
    assert cache.evict(Tier.DEVICE, 4).freed == 2
    assert len(cache.match_prefix([1, 1]).device_pages) == 2
    cache.unlock(node)
    assert cache.evict(Tier.DEVICE, 4).freed == 2


def test_alloc_device_evicts_to_make_room_and_fails_cleanly_when_it_cannot() -> None:
    cache = _cache(pages=4)
    _put(cache, [1, 2, 3])
    pages = cache.alloc_device(3)
    assert pages is not None and cache.match_prefix([1, 2, 3]).device_pages == []
    assert cache.alloc_device(2) is None
    assert cache.held_device_pages == 3
    cache.check_integrity(pages)


def test_unknown_eviction_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown eviction policy 'mru'"):
        RadixTree("mru")
    assert [p.value for p in EvictionPolicy] == ["lru", "lfu", "fifo"]


def test_integrity_check_catches_a_page_with_two_owners_and_a_leak() -> None:
    cache = _cache()
    _put(cache, [1, 2])
    _put(cache, [3])
    a, b = (cache.match_prefix([k]).last_node for k in (1, 3))
    saved = b.device
    b.device = a.device[:1]  # type: ignore[index]
    with pytest.raises(AssertionError, match="two owners"):
        cache.check_integrity([])
    b.device = saved
    cache.check_integrity([])
    cache.device_pool.alloc(1)  # taken outside the cache's books
    with pytest.raises(AssertionError, match="leaked"):
        cache.check_integrity([])


def test_importing_the_cache_does_not_import_torch() -> None:
    code = "import sys, kvtier.cache; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 2), max_size=12), st.booleans(), st.integers(0, 6)),
        max_size=25,
    ),
    st.integers(1, 2),
)
@settings(max_examples=60, deadline=None)
def test_packed_token_keys_drive_the_tree_like_tuple_keys(
    ops: list[tuple[list[int], bool, int]], page: int
) -> None:
    """The same requests keyed by packed TokenPages and by a list of tuples per page give the
    same matches, duplicates, node runs and evictions. Odd-length requests come as int64 arrays
    the keys view (each request its own buffer, as an engine's), the others as lists copied."""
    packed, tuples = _cache(64), _cache(64)
    for tokens, do_insert, evict in ops:
        keys = page_keys(array("q", tokens) if len(tokens) % 2 else tokens, page)
        as_list = [tuple(tokens[i : i + page]) for i in range(0, len(keys) * page, page)]
        outcome = []
        for cache, k in ((packed, keys), (tuples, as_list)):
            match = cache.match_prefix(k)
            assert match.num_device_pages == len(match.device_pages)
            got = [match.device_pages, match.num_host_pages, len(match.last_node.keys)]
            if do_insert:
                new = cache.alloc_device(len(k) - match.num_device_pages)
                assert new is not None
                result = cache.insert(k, match.device_pages + new)
                cache.free_device(new[: result.prefix_len - match.num_device_pages])
                got.append(result.prefix_len)
            got.append(cache.evict(Tier.DEVICE, evict))
            got.append(sorted((list(n.keys), list(n.device or [])) for n in cache.tree.nodes()))
            cache.check_integrity([])
            outcome.append(got)
        assert outcome[0] == outcome[1]
