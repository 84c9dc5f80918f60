"""Page allocator of one tier: which page indices are free.

O(1) per page: a free stack plus an allocated-bitmap that catches double frees and frees of
pages never handed out.
"""

from __future__ import annotations

from collections.abc import Iterable


class PagePool:
    """Hands out page indices 0..capacity-1 of one tier."""

    __slots__ = ("_allocated", "_free", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        # NOTE: popped from the end, so low indices go first.
        self._free = list(range(capacity - 1, -1, -1))
        self._allocated = bytearray(capacity)

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.capacity - len(self._free)

    def alloc(self, n: int) -> list[int] | None:
        """`n` free pages, or None (and nothing taken) when fewer are free."""
        free = self._free
        if n > len(free) or n < 0:
            return None
        if n == 0:
            return []
        pages = free[-n:]
        del free[-n:]
        allocated = self._allocated
        for p in pages:
            allocated[p] = 1
        return pages

    def free(self, pages: Iterable[int]) -> None:
        """Return pages; raises ValueError on a page that is not allocated (nothing freed)."""
        pages = list(pages)
        if not pages:
            return
        allocated = self._allocated
        if min(pages) >= 0 and max(pages) < self.capacity and len(set(pages)) == len(pages):
            for p in pages:
                if not allocated[p]:
                    break
            else:
                for p in pages:
                    allocated[p] = 0
                self._free.extend(pages)
                return
        seen: set[int] = set()
        for p in pages:
            if not 0 <= p < self.capacity or not allocated[p] or p in seen:
                raise ValueError(f"page {p} is not allocated (double free or foreign page)")
            seen.add(p)

    def is_allocated(self, page: int) -> bool:
        return 0 <= page < self.capacity and bool(self._allocated[page])

    def check(self) -> None:
        """Raise AssertionError when the free stack and the bitmap disagree."""
        free = self._free
        assert len(set(free)) == len(free), "a page is free twice"
        assert all(not self._allocated[p] for p in free), "a free page is marked allocated"
        assert sum(self._allocated) + len(free) == self.capacity, "free + used != capacity"
