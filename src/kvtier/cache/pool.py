"""Page allocators of one tier: which page indices are free.

Two representations of the same pool, for the two shapes of allocation a cache sees:

  PagePool  pages as a list of ints: a free stack and the set of allocated pages, every
            operation a C-level bulk operation on the request's list. Best when requests take
            a few pages each (the simulator's 512-token blocks), where runs would be short.
  RunPool   pages as `Pages` runs: the freed runs sorted and coalesced, every operation a few
            steps per run. Best when requests take thousands of pages (page size 1).

Both keep a never-used top, so a tier costs the same whatever its capacity until it is used:

    |<-- handed out at least once: allocated or on the free list -->|<--- never used: top --->|
    0                                                              top                  capacity

Both catch a double free or a foreign page exactly and then free nothing.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import pairwise
from operator import attrgetter

from kvtier.cache.pages import EMPTY, Pages


class _Tier:
    """What both pools count: the tier's capacity, its free pages and the never-used top."""

    __slots__ = ("_top", "capacity", "num_free")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self.num_free = capacity
        self._top = 0  # pages top..capacity-1 were never handed out

    @property
    def num_used(self) -> int:
        return self.capacity - self.num_free


class PagePool(_Tier):
    """Hands out page indices 0..capacity-1 of one tier as lists, freed pages first."""

    __slots__ = ("_allocated", "_free")

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._free: list[int] = []  # freed pages below the top
        self._allocated: set[int] = set()

    def alloc(self, n: int) -> list[int] | None:
        """`n` free pages, or None (and nothing taken) when fewer are free."""
        if n > self.num_free or n < 0:
            return None
        if n == 0:
            return []
        self.num_free -= n
        free = self._free
        if n <= len(free):
            pages = free[-n:]
            del free[-n:]
        else:
            pages = free[:]
            free.clear()
            top = self._top
            self._top = top + n - len(pages)
            pages += range(top, self._top)
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
            self._free += pages  # each page was allocated, and listed once
            self.num_free += len(pages)
            return
        # a page was free, foreign or listed twice: put back exactly the pages that were
        # allocated, which are those below the top and not on the free stack
        free = set(self._free)
        allocated.update(p for p in pages if 0 <= p < self._top and p not in free)
        seen: set[int] = set()
        for p in pages:
            if p not in allocated or p in seen:
                raise ValueError(f"page {p} is not allocated (double free or foreign page)")
            seen.add(p)
        raise AssertionError("unreachable: the allocated set shrank by fewer pages than freed")

    def is_allocated(self, page: int) -> bool:
        return page in self._allocated

    def allocated_runs(self, runs: Iterable[range]) -> bool:
        """Whether every page of `runs` is allocated."""
        allocated = self._allocated
        return all(allocated.issuperset(r) for r in runs)

    def check(self) -> None:
        """Raise AssertionError when the free stack, the allocated set and the top disagree."""
        free, top = self._free, self._top
        assert 0 <= top <= self.capacity, "the top is outside the tier"
        assert len(set(free)) == len(free), "a page is free twice"
        assert self._allocated.isdisjoint(free), "a free page is marked allocated"
        assert all(0 <= p < top for p in self._allocated), "a foreign page is allocated"
        assert all(0 <= p < top for p in free), "a never-used page is on the free stack"
        assert len(self._allocated) + len(free) == top, "free + used != pages handed out"
        assert self.capacity - top + len(free) == self.num_free, "free count drifted"


class RunPool(_Tier):
    """Hands out page indices 0..capacity-1 of one tier as `Pages`, lowest free run first."""

    __slots__ = ("_starts", "_stops")

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        # freed runs below the top: sorted, disjoint, none touching another or the top
        self._starts: list[int] = []
        self._stops: list[int] = []

    @property
    def num_free_runs(self) -> int:
        """Runs on the free list, the never-used top not counted: what the pool's memory is."""
        return len(self._starts)

    def alloc(self, n: int) -> Pages | None:
        """`n` free pages, or None (and nothing taken) when fewer are free."""
        if n > self.num_free or n < 0:
            return None
        if n == 0:
            return EMPTY
        self.num_free -= n
        starts = self._starts
        if not starts:
            top = self._top
            self._top = top + n
            return Pages((range(top, top + n),), n)
        stops = self._stops
        if stops[0] - starts[0] > n:  # the lowest run alone is enough
            start = starts[0]
            starts[0] = start + n
            return Pages((range(start, start + n),), n)
        runs: list[range] = []
        need = n
        j = 0
        while j < len(starts):
            start, stop = starts[j], stops[j]
            if stop - start > need:
                runs.append(range(start, start + need))
                starts[j] = start + need
                need = 0
                break
            runs.append(range(start, stop))
            need -= stop - start
            j += 1
            if not need:
                break
        del starts[:j]
        del stops[:j]
        if need:
            top = self._top
            runs.append(range(top, top + need))
            self._top = top + need
        return Pages(tuple(runs), n)

    def free(self, pages: Sequence[int]) -> None:
        """Return pages; raises ValueError on a page that is not allocated (nothing freed)."""
        if type(pages) is not Pages:
            pages = Pages.of(pages)
        runs = pages.runs
        if len(runs) > 1:
            runs = tuple(sorted(runs, key=_START))
            for low, high in pairwise(runs):
                if high.start < low.stop:
                    raise ValueError(f"page {high.start} is not allocated (listed twice)")
        elif not runs:
            return
        starts, stops, top = self._starts, self._stops, self._top
        for r in runs:
            a, b = r.start, r.stop
            if a < 0 or b > top:
                raise ValueError(f"page {a if a < 0 else max(a, top)} is not allocated")
            i = bisect_right(starts, a)
            if (i and stops[i - 1] > a) or (i < len(starts) and starts[i] < b):
                raise ValueError(f"a page of {a}..{b - 1} is not allocated (double free)")
        if len(runs) == 1:
            self._give_back(a, b, i)
        else:
            for r in reversed(runs):  # high runs first: a run at the top lowers it for the next
                self._give_back(r.start, r.stop, bisect_right(starts, r.start))
        self.num_free += pages.n

    def _give_back(self, a: int, b: int, i: int) -> None:
        """Put a..b-1 back; `i` is its place among the free runs (bisect_right of a)."""
        starts, stops = self._starts, self._stops
        if b == self._top:
            if i and stops[i - 1] == a:
                a = starts.pop(i - 1)
                stops.pop(i - 1)
            self._top = a
            return
        left = i > 0 and stops[i - 1] == a
        right = i < len(starts) and starts[i] == b
        if left and right:
            stops[i - 1] = stops.pop(i)
            del starts[i]
        elif left:
            stops[i - 1] = b
        elif right:
            starts[i] = a
        else:
            starts.insert(i, a)
            stops.insert(i, b)

    def is_allocated(self, page: int) -> bool:
        if not 0 <= page < self._top:
            return False
        i = bisect_right(self._starts, page)
        return not (i and self._stops[i - 1] > page)

    def allocated_runs(self, runs: Iterable[range]) -> bool:
        """Whether every page of `runs` is allocated."""
        starts, stops, top = self._starts, self._stops, self._top
        for r in runs:
            a, b = r.start, r.stop
            if a < 0 or b > top:
                return False
            i = bisect_right(starts, a)
            if (i and stops[i - 1] > a) or (i < len(starts) and starts[i] < b):
                return False
        return True

    def check(self) -> None:
        """Raise AssertionError when the free runs, the top and the free count disagree."""
        starts, stops, top = self._starts, self._stops, self._top
        assert len(starts) == len(stops), "free run bounds out of step"
        assert 0 <= top <= self.capacity, "the top is outside the tier"
        free = self.capacity - top
        for i, (a, b) in enumerate(zip(starts, stops, strict=True)):
            assert 0 <= a < b, f"empty or negative free run {a}..{b}"
            assert i == 0 or stops[i - 1] < a, "free runs overlap, touch or are out of order"
            free += b - a
        assert not stops or stops[-1] < top, "a free run touches or passes the top"
        assert free == self.num_free, "free count drifted"


_START = attrgetter("start")
