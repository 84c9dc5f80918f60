"""Request-level use of a TieredCache: admit a request, then cache (or abort) it when it ends.

Mirrors SGLang's scheduler path (v0.5.x): match_prefix + init_load_back at admission, a lock on
the request's last node while it runs, and RadixCache.cache_finished_req at the end (insert,
free the duplicate pages in kv_indices[cache_protected_len:new_prefix_len], unlock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvtier.cache.hierarchy import TieredCache
from kvtier.cache.keys import KeyRun, PageKey, as_run
from kvtier.cache.pages import PageSeq
from kvtier.cache.radix import MatchResult, TreeNode
from kvtier.cache.storage import Tier
from kvtier.cache.types import LoadBackHandle


@dataclass(slots=True)
class Admission:
    """A running request's pages. `pages[:num_cached]` belong to the tree (locked through
    `last_node`); the rest were allocated for the request. Hits are counted in pages."""

    keys: KeyRun
    pages: PageSeq
    num_cached: int
    last_node: TreeNode
    device_hit: int
    host_hit: int
    store_hit: int
    load: LoadBackHandle | None


def admit(
    cache: TieredCache,
    keys: Sequence[PageKey],
    extra_pages: int = 0,
    match: MatchResult | None = None,
) -> Admission | None:
    """Match `keys` (or take `match`, the caller's fresh `cache.match_prefix(keys)`), load their
    host (and store) part back, lock the prefix and allocate device pages for the uncached rest
    plus `extra_pages`. None when the device cannot hold them: that is checked before anything
    is loaded, so a refused admission changes nothing but the matched nodes' access times."""
    keys = as_run(keys)[:]
    if match is None:
        match = cache.match_prefix(keys)
    if not fits(cache, match, len(keys) - match.num_device_pages + extra_pages):
        return None
    adm = hold(cache, keys, match)
    new = cache.alloc_device(len(keys) - adm.num_cached + extra_pages)
    if new is None:
        cache.unlock(adm.last_node)
        return None
    adm.pages = adm.pages + new  # type: ignore[operator]  # one cache: both lists or both Pages
    return adm


def hold(cache: TieredCache, keys: KeyRun, match: MatchResult) -> Admission:
    """Load the match's host (and store) part back and lock the prefix; the uncached rest gets
    no page here (the caller allocates them, as an engine does when the batch runs)."""
    cached_before = match.num_device_pages + match.num_host_pages
    store_hit = 0
    if match.num_store_pages:
        match = cache.fetch_from_store(keys, match)
        store_hit = match.num_device_pages + match.num_host_pages - cached_before
    load = cache.load_back(match)
    if load is not None:
        prefix, last = load.device_pages, load.last_node
        host_hit = match.num_host_pages - store_hit
    else:
        prefix, last = match.device_pages, match.last_device_node
        host_hit = store_hit = 0
    cache.lock(last)
    return Admission(
        keys, prefix, len(prefix), last, match.num_device_pages, host_hit, store_hit, load
    )


def fits(cache: TieredCache, match: MatchResult, need: int) -> bool:
    """Whether `need` more device pages can be had (free, or evictable once the matched path is
    locked) without touching the matched prefix."""
    room = cache.num_free_device_pages + cache.tree.size(Tier.DEVICE).evictable
    # locking the path takes at most its device pages out of the evictable ones
    if room - match.num_device_pages >= need:
        return True
    if room < need:
        return False
    cache.lock(match.last_node)
    room = cache.num_free_device_pages + cache.tree.size(Tier.DEVICE).evictable
    cache.unlock(match.last_node)
    return room >= need


def finish(cache: TieredCache, adm: Admission, keys: Sequence[PageKey] | None = None) -> int:
    """Cache the request's pages under `keys` (default: its admitted keys; longer keys cover
    pages it grew into), free duplicates and pages beyond the keys, and unlock. Returns the
    number of leading pages that were already on the device."""
    keys = adm.keys if keys is None else as_run(keys)
    n = len(keys)
    if (
        n > len(adm.pages)
        or n < adm.num_cached
        or keys[: adm.num_cached] != adm.keys[: adm.num_cached]
    ):
        raise ValueError("finish keys must extend the admitted prefix and fit the request's pages")
    result = cache.insert(keys, adm.pages[:n])
    duplicates = adm.pages[adm.num_cached : result.prefix_len]
    cache.free_device(duplicates + adm.pages[n:])  # type: ignore[operator]  # one cache: both lists or both Pages
    cache.unlock(adm.last_node)
    return result.prefix_len


def abort(cache: TieredCache, adm: Admission) -> None:
    """Give back a request's own pages without caching them, and unlock its prefix."""
    cache.free_device(adm.pages[adm.num_cached :])
    cache.unlock(adm.last_node)
