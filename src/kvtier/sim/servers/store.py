"""An L3 store in accounting mode: which pages it holds, up to a capacity, and no bytes.

Implements `kvtier.cache.storage.PageStoreHook` for the simulator, as `AccountingStorage` does for
the device and host tiers. The tiered cache saves the host pages it evicts here and fetches a
matched continuation back into the host tier. When full, the least recently saved or loaded page
goes, as a capacity-bounded disk store would drop its oldest files.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class AccountingStore:
    """Page names held, oldest first; `capacity_pages` of them at most."""

    def __init__(self, capacity_pages: int) -> None:
        if capacity_pages < 1:
            raise ValueError(f"a store holds at least one page, got {capacity_pages}")
        self.capacity_pages = capacity_pages
        self.evicted = 0
        self._pages: OrderedDict[bytes, None] = OrderedDict()

    def save(self, hashes: Sequence[bytes], blobs: Sequence[bytes]) -> None:
        if len(hashes) != len(blobs):
            raise ValueError("hash and blob counts differ")
        pages = self._pages
        for h in hashes:
            if h in pages:
                pages.move_to_end(h)
                continue
            pages[h] = None
            if len(pages) > self.capacity_pages:
                pages.popitem(last=False)
                self.evicted += 1

    def contains_prefix(self, hashes: Sequence[bytes]) -> int:
        n = 0
        for h in hashes:
            if h not in self._pages:
                break
            n += 1
        return n

    def load(self, hashes: Sequence[bytes]) -> list[bytes | None]:
        out: list[bytes | None] = []
        for h in hashes:
            if h in self._pages:
                self._pages.move_to_end(h)
                out.append(b"")
            else:
                out.append(None)
        return out

    def __len__(self) -> int:
        return len(self._pages)
