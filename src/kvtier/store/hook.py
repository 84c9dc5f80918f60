"""The tiered cache's view of a store: `PageStoreHook` (kvtier.cache.storage) over a `PageStore`.

The cache saves the host pages it evicts, asks at match time how much of the rest of a prefix
the store holds, and loads that continuation into host pages. Give it a `ResilientStore` (what
`open_store` returns) so a store that is down reads as misses rather than failing a request.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtier.store.base import PageStore


class StoreHook:
    """Implements `kvtier.cache.storage.PageStoreHook` on top of a page store."""

    def __init__(self, store: PageStore) -> None:
        self.store = store

    def save(self, hashes: Sequence[bytes], blobs: Sequence[bytes]) -> None:
        self.store.put(hashes, blobs)

    def contains_prefix(self, hashes: Sequence[bytes]) -> int:
        return self.store.exists_prefix(hashes)

    def load(self, hashes: Sequence[bytes]) -> list[bytes | None]:
        return self.store.get(hashes)
