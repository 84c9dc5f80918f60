"""Page allocator of one tier: which page indices are free.

A free stack plus the set of allocated pages. Every operation is a C-level bulk operation on the
whole request (list slicing, set update / difference), with no Python loop per page, and still
catches double frees and frees of pages never handed out.
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
        self._allocated: set[int] = set()

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
        self._allocated.update(pages)
        return pages

    def free(self, pages: Iterable[int]) -> None:
        """Return pages; raises ValueError on a page that is not allocated (nothing freed)."""
        if not isinstance(pages, list):
            pages = list(pages)
        if not pages:
            return
        allocated = self._allocated
        before = len(allocated)
        allocated.difference_update(pages)
        if len(allocated) == before - len(pages):
            self._free.extend(pages)  # each page was allocated, and listed once
            return
        # a page was free, foreign or listed twice: put back exactly the pages that were
        # allocated, which are those in range and not on the free stack
        free = set(self._free)
        allocated.update(p for p in pages if 0 <= p < self.capacity and p not in free)
        seen: set[int] = set()
        for p in pages:
            if p not in allocated or p in seen:
                raise ValueError(f"page {p} is not allocated (double free or foreign page)")
            seen.add(p)
        raise AssertionError("unreachable: the allocated set shrank by fewer pages than freed")

    def is_allocated(self, page: int) -> bool:
        return page in self._allocated

    def check(self) -> None:
        """Raise AssertionError when the free stack and the allocated set disagree."""
        free = self._free
        assert len(set(free)) == len(free), "a page is free twice"
        assert self._allocated.isdisjoint(free), "a free page is marked allocated"
        assert all(0 <= p < self.capacity for p in self._allocated), "a foreign page is allocated"
        assert len(self._allocated) + len(free) == self.capacity, "free + used != capacity"
