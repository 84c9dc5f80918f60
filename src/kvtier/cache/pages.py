"""Page runs: a sequence of page indices stored as runs of consecutive pages.

An engine allocates thousands of pages for one long prompt (page size 1) and a handful for a
short one; both cost the same here, one `range` per run of consecutive pages:

    Pages((range(40, 43), range(7, 9)))   ==  [40, 41, 42, 7, 8]

The runs are kept canonical (none empty, no run starting where the one before it stops), so
two equal sequences have equal runs. Slicing and concatenation cost per run, never per page.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import overload


class Pages(Sequence[int]):
    """An immutable sequence of page indices, held as canonical runs (`range`s of step 1)."""

    __slots__ = ("n", "runs")

    def __init__(self, runs: tuple[range, ...] = (), n: int = 0) -> None:
        # NOTE: trusted constructor: `runs` canonical and `n` their total length
        self.runs = runs
        self.n = n

    @classmethod
    def of(cls, pages: Iterable[int]) -> Pages:
        """The runs of any iterable of page indices (one pass over the pages)."""
        if type(pages) is Pages:
            return pages
        if type(pages) is range and pages.step == 1:
            return cls((pages,), len(pages)) if pages else EMPTY
        runs: list[range] = []
        start = stop = None
        for p in pages:
            p = int(p)
            if p == stop:
                stop += 1
                continue
            if start is not None:
                runs.append(range(start, stop))  # type: ignore[arg-type]
            start, stop = p, p + 1
        if start is None:
            return EMPTY
        runs.append(range(start, stop))  # type: ignore[arg-type]
        return cls(tuple(runs), sum(len(r) for r in runs))

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Pages: ...
    def __getitem__(self, i: int | slice) -> int | Pages:
        runs = self.runs
        if type(i) is slice:
            start, stop, step = i.indices(self.n)
            if step != 1:
                raise ValueError("Pages slices take no step")
            if stop <= start:
                return EMPTY
            if start == 0 and stop == self.n:
                return self
            if len(runs) == 1:
                return Pages((runs[0][start:stop],), stop - start)
            if stop == self.n:  # a suffix: the runs from the one holding `start` on
                at = 0
                for j, r in enumerate(runs):
                    end = at + len(r)
                    if end > start:
                        if start == at:
                            return Pages(runs[j:], stop - start)
                        return Pages((r[start - at :], *runs[j + 1 :]), stop - start)
                    at = end
            cut: list[range] = []  # the runs covering positions start..stop-1
            at = 0
            for r in runs:
                end = at + len(r)
                if end > start:
                    # a range slices like a list: a stop past its end is cut to the end
                    cut.append(r[start - at if start > at else 0 : stop - at])
                    if end >= stop:
                        break
                at = end
            return Pages(tuple(cut), stop - start)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("page index out of range")
        for r in runs:
            if i < len(r):
                return r[i]
            i -= len(r)
        raise AssertionError("unreachable: the runs are shorter than n")

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(self.runs)

    def tolist(self) -> list[int]:
        return list(chain.from_iterable(self.runs))

    def __add__(self, other: Sequence[int]) -> Pages:
        if type(other) is not Pages:
            other = Pages.of(other)
        if not other.n:
            return self
        if not self.n:
            return other
        a, b = self.runs, other.runs
        if a[-1].stop == b[0].start:
            return Pages((*a[:-1], range(a[-1].start, b[0].stop), *b[1:]), self.n + other.n)
        return Pages(a + b, self.n + other.n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pages):
            return self.n == other.n and self.runs == other.runs
        if isinstance(other, (list, tuple, range)):
            return self.n == len(other) and self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a run, like a list, is not a key

    def __repr__(self) -> str:
        body = ", ".join(
            f"{r.start}..{r.stop - 1}" if len(r) > 1 else f"{r.start}" for r in self.runs
        )
        return f"Pages[{body}]"


EMPTY = Pages()

# A cache's page sequences are all lists (kvtier.cache.pool.PagePool) or all Pages (RunPool).
PageSeq = list[int] | Pages


def join(parts: Sequence[PageSeq]) -> PageSeq:
    """The pages of `parts` (all lists or all Pages, at least one) in order."""
    if type(parts[0]) is list:
        return list(chain.from_iterable(parts))
    return concat(parts)  # type: ignore[arg-type]


def concat(parts: Iterable[Pages]) -> Pages:
    """The pages of `parts` in order, adjacent runs merged."""
    runs: list[range] = []
    n = 0
    for part in parts:
        if not part.n:
            continue
        n += part.n
        first = part.runs[0]
        if runs and runs[-1].stop == first.start:
            runs[-1] = range(runs[-1].start, first.stop)
            runs.extend(part.runs[1:])
        else:
            runs.extend(part.runs)
    return Pages(tuple(runs), n) if n else EMPTY
