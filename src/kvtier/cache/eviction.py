"""Eviction order: which unlocked leaf of a tier goes first.

Mirrors SGLang's `--radix-eviction-policy` (mem_cache/evict_policy.py, v0.5.x): lru (default),
lfu, fifo. Every priority here only grows over a node's life, which lets the tree keep one lazy
heap entry per node and refresh it when popped (see RadixTree.pop_candidate).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtier.cache.radix import TreeNode


class EvictionPolicy(StrEnum):
    LRU = "lru"
    LFU = "lfu"
    FIFO = "fifo"


Priority = Callable[["TreeNode"], object]


def _lru(node: TreeNode) -> object:
    return node.last_access


def _lfu(node: TreeNode) -> object:
    return (node.hit_count, node.last_access)


def _fifo(node: TreeNode) -> object:
    return node.created


_PRIORITIES: dict[EvictionPolicy, Priority] = {
    EvictionPolicy.LRU: _lru,
    EvictionPolicy.LFU: _lfu,
    EvictionPolicy.FIFO: _fifo,
}


def priority_of(policy: EvictionPolicy | str) -> Priority:
    """The priority function of a policy: the smallest value is evicted first."""
    try:
        return _PRIORITIES[EvictionPolicy(policy)]
    except ValueError:
        names = ", ".join(p.value for p in EvictionPolicy)
        raise ValueError(f"unknown eviction policy {policy!r}; choose one of {names}") from None
