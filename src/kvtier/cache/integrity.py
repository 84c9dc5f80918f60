"""Every invariant of a TieredCache, checked from scratch (tests call it after each step).

Who owns the pages of each tier (counts, not address ranges: any index can be in any part):

    device  |<- nodes: evictable ->|<- nodes: protected ->|<- held by callers ->|<- free ->|
    host    |<- nodes: evictable ->|<- nodes: protected ->|<-------------- free --------->|
            0                                                                     capacity
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvtier.cache.pool import PagePool
from kvtier.cache.storage import Tier

if TYPE_CHECKING:
    from kvtier.cache.hierarchy import TieredCache
    from kvtier.cache.radix import TreeNode


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
    assert root.device == [] and root.host is None and root.lock_ref >= 1, "root changed"
    pins: Counter[int] = Counter(id(n) for c in cache._copies for n in c.nodes)
    device_pages: list[int] = []
    host_pages: list[int] = []
    device_protected = host_protected = 0
    for node in tree.nodes():
        _check_node(tree.root, node, pins)
        protected = node.protected
        if node.device is not None:
            device_pages += node.device
            device_protected += len(node.device) if protected else 0
        if node.host is not None:
            host_pages += node.host
            host_protected += len(node.host) if protected else 0
        for tier in (Tier.DEVICE, Tier.HOST):
            if tree.is_candidate(node, tier):
                assert tree.is_queued(node, tier), f"evictable {node!r} not queued for {tier}"
    assert tree.device_total == len(device_pages), "device total drifted"
    assert tree.host_total == len(host_pages), "host total drifted"
    assert tree.device_protected == device_protected, "device protected size drifted"
    assert tree.host_protected == host_protected, "host protected size drifted"
    _check_owned(cache.device_pool, device_pages, cache.held_device_pages, "device")
    _check_owned(cache.host_pool, host_pages, 0, "host")
    if held_device_pages is not None:
        held = set(held_device_pages)
        assert len(held) == len(held_device_pages) == cache.held_device_pages, "held count"
        assert not held & set(device_pages), "a held page is also owned by a node"
        assert all(cache.device_pool.is_allocated(p) for p in held), "a held page is free"


def _check_node(root: TreeNode, node: TreeNode, pins: Counter[int]) -> None:
    parent = node.parent
    assert parent is not None, f"{node!r} is in the tree without a parent"
    assert node.keys, "empty node"
    assert parent.children.get(node.keys[0]) is node, "child keyed by another key"
    assert node.device is not None or node.host is not None, f"{node!r} has no pages"
    for run in (node.device, node.host):
        assert run is None or len(run) == len(node.keys), f"{node!r} page run length"
    if node.device is not None:
        assert parent is root or parent.device is not None, "device node under an evicted one"
    assert node.lock_ref >= 0 and node.pinned >= 0, "negative lock or pin"
    assert node.lock_ref >= sum(c.lock_ref for c in node.children.values()), "lock below path"
    assert node.pinned == pins[id(node)], f"{node!r} pinned {node.pinned} by {pins[id(node)]}"


def _check_owned(pool: PagePool, owned: list[int], held: int, tier: str) -> None:
    pool.check()
    assert len(set(owned)) == len(owned), f"a {tier} page has two owners"
    assert all(pool.is_allocated(p) for p in owned), f"a free {tier} page is owned by a node"
    assert held >= 0, f"negative held {tier} page count"
    assert len(owned) + held + pool.num_free == pool.capacity, f"{tier} pages leaked"
