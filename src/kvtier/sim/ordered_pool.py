"""A list that takes appends at its end and pops at any index, each in O(log n).

`list.pop(i)` moves every later element, so a ready queue of ten million turns popped at random
indices takes hours. `OrderedPool` keeps the same order and the same answers (`pop(i)` returns
the element a list would, and leaves the rest in the same order), with the elements in append
slots and a Fenwick tree counting the slots still held, so the i-th element is found by binary
lifting over the tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
_GONE: object = object()  # a popped slot


class OrderedPool(Generic[T]):
    def __init__(self, items: Iterable[T] = ()) -> None:
        self._slots: list[object] = []
        self._tree: list[int] = [0]  # 1-based Fenwick tree over the slots: 1 per held slot
        self._size = 0
        for item in items:
            self.append(item)

    def __len__(self) -> int:
        return self._size

    def append(self, item: T) -> None:
        self._slots.append(item)
        n = len(self._slots)
        # a new last node: its own 1, plus the nodes its range covers (i - lowbit(i), i)
        low = n & -n
        covered = 1
        child = n - 1
        while child > n - low:
            covered += self._tree[child]
            child -= child & -child
        self._tree.append(covered)
        self._size += 1

    def pop(self, index: int = -1) -> T:
        """The element at `index` (as a list counts, negatives from the end), removed."""
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("pop index out of range")
        slot = self._find(index + 1)
        item = self._slots[slot - 1]
        self._slots[slot - 1] = _GONE
        tree, n = self._tree, len(self._slots)
        while slot <= n:
            tree[slot] -= 1
            slot += slot & -slot
        self._size -= 1
        if not self._size:
            self._slots, self._tree = [], [0]
        return item  # type: ignore[return-value]

    def _find(self, rank: int) -> int:
        """The 1-based slot of the `rank`-th held slot."""
        tree, n = self._tree, len(self._slots)
        pos = 0
        step = 1 << (n.bit_length() - 1)
        while step:
            nxt = pos + step
            if nxt <= n and tree[nxt] < rank:
                pos = nxt
                rank -= tree[nxt]
            step >>= 1
        return pos + 1

    def __iter__(self) -> Iterator[T]:
        return (item for item in self._slots if item is not _GONE)  # type: ignore[misc]
