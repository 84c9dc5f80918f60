"""Where a tier's page bytes live, and how pages move between tiers.

The radix tree and the allocators deal only in page indices. A `PageStorage` holds the bytes
behind those indices for one tier (device or host); a `TransferEngine` copies batches of pages
between two storages asynchronously. `AccountingStorage` and `ImmediateTransfer` hold and move
no bytes: the simulator replays workloads through the same tree with them.

Page index i of a tier's allocator is row i of that tier's storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable


class Tier(StrEnum):
    DEVICE = "device"
    HOST = "host"
    STORE = "store"


@runtime_checkable
class PageStorage(Protocol):
    """The bytes of one tier's pages, indexed by page."""

    tier: Tier
    num_pages: int

    def copy_pages(
        self, src_pages: Sequence[int], dst: PageStorage, dst_pages: Sequence[int]
    ) -> None:
        """Copy `src_pages` of this storage into `dst_pages` of `dst`, synchronously."""
        ...

    def read_page_bytes(self, pages: Sequence[int]) -> list[bytes]:
        """Serialized bytes of each page (for an L3 store); empty bytes when accounting only."""
        ...

    def write_page_bytes(self, pages: Sequence[int], blobs: Sequence[bytes]) -> None:
        """Fill pages from bytes produced by `read_page_bytes` of a compatible storage."""
        ...


class TransferHandle(Protocol):
    """A batch of page copies in flight."""

    def done(self) -> bool: ...

    def wait(self) -> None: ...

    def wait_layer(self, layer: int) -> None:
        """Block until `layer` of every page in the batch has arrived."""
        ...


class TransferEngine(Protocol):
    def submit(
        self, src: PageStorage, src_pages: Sequence[int], dst: PageStorage, dst_pages: Sequence[int]
    ) -> TransferHandle: ...

    def close(self) -> None: ...


class AccountingStorage:
    """Counts pages, holds no bytes."""

    def __init__(self, tier: Tier, num_pages: int) -> None:
        self.tier = tier
        self.num_pages = num_pages

    def copy_pages(
        self, src_pages: Sequence[int], dst: PageStorage, dst_pages: Sequence[int]
    ) -> None:
        if len(src_pages) != len(dst_pages):
            raise ValueError("source and destination page counts differ")

    def read_page_bytes(self, pages: Sequence[int]) -> list[bytes]:
        return [b""] * len(pages)

    def write_page_bytes(self, pages: Sequence[int], blobs: Sequence[bytes]) -> None:
        if len(pages) != len(blobs):
            raise ValueError("page and blob counts differ")


class _Done:
    def done(self) -> bool:
        return True

    def wait(self) -> None:
        return None

    def wait_layer(self, layer: int) -> None:
        return None


DONE = _Done()


class ImmediateTransfer:
    """Copies synchronously on submit; the handle is already complete."""

    def submit(
        self, src: PageStorage, src_pages: Sequence[int], dst: PageStorage, dst_pages: Sequence[int]
    ) -> TransferHandle:
        src.copy_pages(src_pages, dst, dst_pages)
        return DONE

    def close(self) -> None:
        return None


@runtime_checkable
class PageStoreHook(Protocol):
    """An L3 store of pages keyed by chained page hashes (kvtier.cache.keys.store_key).

    The cache hands host pages it evicts to `save`, asks `contains_prefix` at match time, and
    fetches with `load`. Pages are the serialized bytes of `PageStorage.read_page_bytes`.
    """

    def save(self, hashes: Sequence[bytes], blobs: Sequence[bytes]) -> None:
        """Store one blob per hash (a store may drop pages under its own capacity limit)."""
        ...

    def contains_prefix(self, hashes: Sequence[bytes]) -> int:
        """How many leading hashes are stored."""
        ...

    def load(self, hashes: Sequence[bytes]) -> list[bytes | None]:
        """The blob of each hash, None where it is no longer stored."""
        ...
