"""Configuration and result types of the tiered cache (kvtier.cache.hierarchy)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple

from kvtier.cache.pages import PageSeq
from kvtier.cache.radix import TierSize
from kvtier.cache.storage import TransferHandle

if TYPE_CHECKING:
    from kvtier.cache.radix import TreeNode


class WritePolicy(StrEnum):
    WRITE_THROUGH = "write_through"
    WRITE_THROUGH_SELECTIVE = "write_through_selective"
    WRITE_BACK = "write_back"


# SGLang HiRadixCache.__init__: write_through_threshold = 1 if write_through else 2.
WRITE_THRESHOLD = {WritePolicy.WRITE_THROUGH: 1, WritePolicy.WRITE_THROUGH_SELECTIVE: 2}


class EvictResult(NamedTuple):
    """`freed` pages of the tier returned to its pool; `written` pages copied one tier down
    first (device -> host under write_back, host -> store)."""

    freed: int
    written: int


@dataclass(frozen=True, slots=True)
class LoadBackHandle:
    """A host -> device load in flight. `device_pages` is the whole matched prefix on the device
    once the copy completes; `last_node` ends it (lock it to keep the prefix)."""

    handle: TransferHandle
    device_pages: PageSeq
    num_loaded: int
    last_node: TreeNode

    def done(self) -> bool:
        return self.handle.done()

    def wait(self) -> None:
        self.handle.wait()


@dataclass(frozen=True, slots=True)
class CacheSizes:
    """Pages per tier: in the tree (evictable + protected) and free in the pool."""

    device: TierSize
    device_free: int
    device_capacity: int
    host: TierSize
    host_free: int
    host_capacity: int


@dataclass(frozen=True, slots=True)
class CacheCounters:
    """Pages moved since the cache was built."""

    device_evicted: int
    host_evicted: int
    written_to_host: int
    loaded_from_host: int
    saved_to_store: int
    loaded_from_store: int
