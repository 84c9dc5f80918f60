"""Vectored file I/O for page files, and the bounded thread pool large batches run on.

A page travels as a list of buffers (its header, then the runs of its payload as they lie in
memory), so a write gathers them with one `writev` and a read scatters the file straight into
them with one `preadv`: no page is ever joined into, or read into, a buffer of its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from kvtier.store.base import Buffer

_T = TypeVar("_T")

IOV_MAX = max(16, os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024)
IO_THREADS = max(1, min(4, os.cpu_count() or 1))
PARALLEL_BYTES = 16 << 20  # a batch moving at least this much is split over the pool's threads
PIECE_BYTES = 256 << 10  # a page is read in pieces this large, each hashed while still cached

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def as_views(buffers: Sequence[Buffer]) -> list[memoryview]:
    """The buffers as byte memoryviews (no copy)."""
    return [b if type(b) is memoryview and b.format == "B" else _byte_view(b) for b in buffers]


def _byte_view(buffer: Buffer) -> memoryview:
    view = memoryview(buffer)
    return view if view.format == "B" else view.cast("B")


def advance(views: list[memoryview], start: int, done: int) -> int:
    """Drop `done` bytes from the front of views[start:]; the index of the first unfinished."""
    while done and start < len(views):
        if done >= views[start].nbytes:
            done -= views[start].nbytes
            start += 1
        else:
            views[start] = views[start][done:]
            done = 0
    while start < len(views) and not views[start].nbytes:
        start += 1
    return start


def write_all(fd: int, buffers: Sequence[Buffer]) -> int:
    """Write every buffer in order at the file's position (writev, repeated on a short write);
    the bytes written."""
    views = as_views(buffers)
    want, total, first = sum(v.nbytes for v in views), 0, 0
    while total < want:
        n = os.writev(fd, views[first : first + IOV_MAX])
        if n <= 0:
            raise OSError("writev wrote nothing")
        total += n
        if total < want:
            first = advance(views, first, n)
    return total


def read_into(fd: int, buffers: Sequence[Buffer], offset: int) -> int:
    """Fill the buffers in order from the file at `offset` (preadv, repeated on a short read);
    the bytes read, fewer only at the end of the file."""
    views = as_views(buffers)
    want, total, first = sum(v.nbytes for v in views), 0, 0
    while total < want:
        n = os.preadv(fd, views[first : first + IOV_MAX], offset + total)
        if n <= 0:
            break
        total += n
        if total < want:
            first = advance(views, first, n)
    return total


def pieces(buffers: Sequence[Buffer], size: int = PIECE_BYTES) -> list[list[memoryview]]:
    """The buffers cut into consecutive groups of at most `size` bytes, in order."""
    groups: list[list[memoryview]] = [[]]
    room = size
    for view in as_views(buffers):
        while view.nbytes:
            if not room:
                groups.append([])
                room = size
            take = min(room, view.nbytes)
            groups[-1].append(view[:take])
            view, room = view[take:], room - take
    return groups


def split(count: int, nbytes: int, threads: int) -> list[tuple[int, int]]:
    """[lo, hi) runs of a batch of `count` pages moving `nbytes`: one run for a small batch,
    else up to `threads` runs of about equal size, in order."""
    n = 1 if nbytes < PARALLEL_BYTES else max(1, min(threads, count))
    return [(count * k // n, count * (k + 1) // n) for k in range(n)]


def run_parallel(jobs: Sequence[Callable[[], _T]]) -> list[_T]:
    """The jobs' results in order: the first on this thread, the rest on the shared pool."""
    global _pool
    if len(jobs) <= 1:
        return [job() for job in jobs]
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="kvtier-store-io")
    futures = [_pool.submit(job) for job in jobs[1:]]
    first = jobs[0]()
    return [first, *(f.result() for f in futures)]
