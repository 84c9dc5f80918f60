"""Tiered radix KV cache: a page-keyed radix tree over device, host and L3 store tiers.

Start with `TieredCache` (hierarchy.py) and the request helpers `admit` / `finish` / `abort`
(request.py). Storage backends implement `PageStorage`; `AccountingStorage` with
`ImmediateTransfer` runs the same cache without bytes. torch is imported only by the tensor
storage modules.
"""

from kvtier.cache.eviction import EvictionPolicy
from kvtier.cache.hierarchy import TieredCache
from kvtier.cache.keys import page_hashes, page_keys, store_key
from kvtier.cache.pages import Pages
from kvtier.cache.pool import PagePool, RunPool
from kvtier.cache.radix import InsertResult, MatchResult, RadixTree, TierSize, TreeNode
from kvtier.cache.request import Admission, abort, admit, finish
from kvtier.cache.storage import (
    AccountingStorage,
    ImmediateTransfer,
    PageStorage,
    PageStoreHook,
    Tier,
    TransferEngine,
    TransferHandle,
)
from kvtier.cache.types import CacheCounters, CacheSizes, EvictResult, LoadBackHandle, WritePolicy

__all__ = [
    "AccountingStorage",
    "Admission",
    "CacheCounters",
    "CacheSizes",
    "EvictResult",
    "EvictionPolicy",
    "ImmediateTransfer",
    "InsertResult",
    "LoadBackHandle",
    "MatchResult",
    "PagePool",
    "PageStorage",
    "PageStoreHook",
    "Pages",
    "RadixTree",
    "RunPool",
    "Tier",
    "TierSize",
    "TieredCache",
    "TransferEngine",
    "TransferHandle",
    "TreeNode",
    "WritePolicy",
    "abort",
    "admit",
    "finish",
    "page_hashes",
    "page_keys",
    "store_key",
]
