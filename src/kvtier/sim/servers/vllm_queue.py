"""vLLM V1's waiting queue, as vllm/v1/core/sched/request_queue.py keeps it (read in v0.32.0).

* `fcfs` (FCFSRequestQueue): a deque; a new request joins the end, a preempted one the front;
* `priority` (PriorityRequestQueue): a heap ordered as `Request.__lt__` orders requests, by
  priority, then arrival time, then request id; a preempted request is pushed like a new one.
  A trace gives every request one priority and arrives in rid order, so the order is by rid
  (unique), each push and pop O(log n).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class FcfsQueue(deque[T]):
    """A deque (its length and head in C: the loop reads them every event)."""

    add = deque.append
    prepend = deque.appendleft

    def peek(self) -> T:
        return self[0]


class PriorityQueue(Generic[T]):
    """Items in the order of `rank` (unique per item), lowest first."""

    def __init__(self, rank: Callable[[T], int]) -> None:
        self._rank = rank
        self._heap: list[tuple[int, T]] = []

    def add(self, item: T) -> None:
        heapq.heappush(self._heap, (self._rank(item), item))

    prepend = add  # PriorityRequestQueue.prepend_request: the heap decides

    def peek(self) -> T:
        return self._heap[0][1]

    def popleft(self) -> T:
        return heapq.heappop(self._heap)[1]

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[T]:
        """In queue order (PriorityRequestQueue.__iter__ pops a copy)."""
        return (item for _, item in sorted(self._heap, key=lambda entry: entry[0]))
