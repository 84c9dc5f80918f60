"""Every invariant of a TieredCache, checked from scratch (tests call it after each step).

Who owns the pages of each tier (counts, not address ranges: any index can be in any part;
ownership is checked run by run, never page by page):

    device  |<- nodes: evictable ->|<- nodes: protected ->|<- held by callers ->|<- free ->|
    host    |<- nodes: evictable ->|<- nodes: protected ->|<-------------- free --------->|
            0                                                                     capacity
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from kvtier.cache.pages import Pages
from kvtier.cache.pool import PagePool, RunPool
from kvtier.cache.storage import Tier

if TYPE_CHECKING:
    from kvtier.cache.hierarchy import TieredCache
    from kvtier.cache.radix import RadixTree, TreeNode


def check_cache(cache: TieredCache, held_device_pages: Sequence[int] | None = None) -> None:
    """Raise AssertionError naming the first broken invariant.

    Page ownership: each page of a tier belongs to exactly one node, or is free, or (device only)
    is held by a caller; free + owned + held = capacity. Tree shape: children keyed by their
    first key, page runs as long as the key runs, no node without pages on some tier, device
    nodes prefix-closed. Locks: never negative, a node's count covers its children's. Pins match
    the copies in flight. Sizes: evictable + protected per tier equal a recount. Every evictable
    leaf is queued for eviction.
    """
    tree = cache.tree
    root = tree.root
    assert not root.device and root.host is None and root.lock_ref >= 1, "root changed"
    pins: Counter[int] = Counter(id(n) for c in cache._copies for n in c.nodes)
    device_runs: list[range] = []
    host_runs: list[range] = []
    device_total = host_total = device_protected = host_protected = 0
    for node in tree.nodes():
        _check_node(tree, node, pins)
        protected = node.protected
        if node.device is not None:
            device_runs += Pages.of(node.device).runs
            device_total += len(node.device)
            device_protected += len(node.device) if protected else 0
        if node.host is not None:
            host_runs += Pages.of(node.host).runs
            host_total += len(node.host)
            host_protected += len(node.host) if protected else 0
        for tier in (Tier.DEVICE, Tier.HOST):
            if tree.is_candidate(node, tier):
                assert tree.is_queued(node, tier), f"evictable {node!r} not queued for {tier}"
    assert tree.device_total == device_total, "device total drifted"
    assert tree.host_total == host_total, "host total drifted"
    assert tree.device_protected == device_protected, "device protected size drifted"
    assert tree.host_protected == host_protected, "host protected size drifted"
    _check_owned(cache.device_pool, device_runs, device_total, cache.held_device_pages, "device")
    _check_owned(cache.host_pool, host_runs, host_total, 0, "host")
    if held_device_pages is not None:
        held = Pages.of(held_device_pages)
        assert held.n == len(held_device_pages) == cache.held_device_pages, "held count"
        assert _disjoint(held.runs), "a held page is listed twice"
        assert _disjoint([*held.runs, *device_runs]), "a held page is also owned by a node"
        assert cache.device_pool.allocated_runs(held.runs), "a held page is free"


def _check_node(tree: RadixTree, node: TreeNode, pins: Counter[int]) -> None:
    root = tree.root
    parent = node.parent
    assert parent is not None, f"{node!r} is in the tree without a parent"
    assert node.keys, "empty node"
    assert node.size == len(node.keys), f"{node!r} size is not its key count"
    assert parent.children.get(node.keys[0]) is node, "child keyed by another key"
    assert node.device is not None or node.host is not None, f"{node!r} has no pages"
    for run in (node.device, node.host):
        if run is None:
            continue
        assert len(run) == len(node.keys), f"{node!r} page run length"
        assert isinstance(run, Pages if tree.page_runs else list), f"{node!r} page run {run!r}"
        if isinstance(run, Pages):
            assert run.n == sum(len(r) for r in run.runs), f"{node!r} page count drifted"
            assert all(
                r and r.step == 1 and (i == 0 or run.runs[i - 1].stop != r.start)
                for i, r in enumerate(run.runs)
            ), f"{node!r} page runs not canonical"
    if node.device is not None:
        assert parent is root or parent.device is not None, "device node under an evicted one"
    assert node.lock_ref >= 0 and node.pinned >= 0, "negative lock or pin"
    assert node.lock_ref >= sum(c.lock_ref for c in node.children.values()), "lock below path"
    assert node.pinned == pins[id(node)], f"{node!r} pinned {node.pinned} by {pins[id(node)]}"


def _disjoint(runs: Sequence[range]) -> bool:
    ordered = sorted(runs, key=lambda r: r.start)
    return all(a.stop <= b.start for a, b in pairwise(ordered))


def _check_owned(
    pool: PagePool | RunPool, owned: list[range], count: int, held: int, tier: str
) -> None:
    pool.check()
    assert _disjoint(owned), f"a {tier} page has two owners"
    assert pool.allocated_runs(owned), f"a free {tier} page is owned by a node"
    assert held >= 0, f"negative held {tier} page count"
    assert count + held + pool.num_free == pool.capacity, f"{tier} pages leaked"
