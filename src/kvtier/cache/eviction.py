"""Eviction order: which unlocked leaf of a tier goes first.

Mirrors SGLang's `--radix-eviction-policy` (mem_cache/evict_policy.py, v0.5.x): lru (default),
lfu, fifo. Every priority here only grows over a node's life, which lets the tree keep one lazy
heap entry per node and refresh it when popped (see RadixTree.pop_candidate).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtier.cache.radix import TreeNode


class EvictionPolicy(StrEnum):
    LRU = "lru"
    LFU = "lfu"
    FIFO = "fifo"


Priority = Callable[["TreeNode"], object]


# attrgetter: a priority is read once per heap push and pop, without a Python-level call
_lru: Priority = attrgetter("last_access")
_lfu: Priority = attrgetter("hit_count", "last_access")
_fifo: Priority = attrgetter("created")


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
