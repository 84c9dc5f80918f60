"""Where a host pool's pages lie in memory, so the store reads and writes them in place.

SGLang's flat page (`get_data_page(index, flat=True)`) is the row-major order of the page's view
(`flat=False`): for a `layer_first` MHA pool, K then V of each layer, `page_size x heads x
head_dim` elements each, strided across the pool. `PageMemory` finds those runs once per pool,
from the view's shape and strides, so a page moves as a list of memoryviews of the pool's own
buffer: written from there by one writev, read into there by one preadv (or from the socket),
with no copy in between. A pool whose page view is not a view (a copy made per call, memory
that is not the CPU's) has none, and its pages go through a staging buffer as SGLang's own
flat pages do.

    pool buffer  |K l0 p0|K l0 p1|...|K l1 p0|K l1 p1|...|V l0 p0|...
    page p1 runs         ^-------^           ^-------^        ...   (2 x layers runs)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class PageMemory:
    """The runs of one page of a host pool, as byte offsets from the page's first element."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    base_ptr: int
    pattern: tuple[tuple[int, int], ...]  # (offset, length) in bytes, row-major order
    buffer: memoryview  # the whole storage the pool's pages live in, as bytes
    element_size: int

    @classmethod
    def of(cls, host_pool: Any, page_bytes: int) -> PageMemory | None:
        """The page memory of `host_pool`, or None when its page views are not views of one
        CPU buffer (then pages are staged)."""
        try:
            first = host_pool.get_data_page(0, flat=False)
            again = host_pool.get_data_page(0, flat=False)
        except Exception:
            return None
        if (
            not isinstance(first, torch.Tensor)
            or first.device.type != "cpu"
            or first.data_ptr() != again.data_ptr()  # both alive: a view, not a fresh copy
            or first.numel() * first.element_size() != page_bytes
        ):
            return None
        storage = first.untyped_storage()
        whole = torch.empty(0, dtype=torch.uint8).set_(storage)
        return cls(
            shape=tuple(first.shape),
            stride=tuple(first.stride()),
            base_ptr=storage.data_ptr(),
            pattern=_runs(tuple(first.shape), tuple(first.stride()), first.element_size()),
            buffer=_memory(whole),
            element_size=first.element_size(),
        )

    def runs(self, host_pool: Any, start: int) -> list[memoryview] | None:
        """The writable runs of the page at host index `start`; None if that page's view is
        not laid out as the first page's (it is then staged)."""
        page = host_pool.get_data_page(start, flat=False)
        if (
            tuple(page.shape) != self.shape
            or tuple(page.stride()) != self.stride
            or page.untyped_storage().data_ptr() != self.base_ptr
        ):
            return None
        at = page.storage_offset() * self.element_size
        buf = self.buffer
        return [buf[at + offset : at + offset + length] for offset, length in self.pattern]


def _runs(
    shape: tuple[int, ...], stride: tuple[int, ...], element_size: int
) -> tuple[tuple[int, int], ...]:
    """(byte offset, byte length) of each contiguous run of a strided view, in row-major order,
    adjacent runs merged."""
    dims = [(n, s) for n, s in zip(shape, stride, strict=True) if n != 1]
    run, k = 1, len(dims)
    while k and dims[k - 1][1] == run:
        run *= dims[k - 1][0]
        k -= 1
    lead = dims[:k]
    merged: list[list[int]] = []
    for index in itertools.product(*(range(n) for n, _ in lead)):
        offset = sum(i * s for i, (_, s) in zip(index, lead, strict=True)) * element_size
        if merged and merged[-1][0] + merged[-1][1] == offset:
            merged[-1][1] += run * element_size
        else:
            merged.append([offset, run * element_size])
    return tuple((offset, length) for offset, length in merged)


def tensor_memory(tensor: torch.Tensor) -> memoryview | None:
    """The bytes of a contiguous CPU tensor as a writable memoryview (no copy), else None."""
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        return None
    return _memory(tensor.detach().reshape(-1).view(torch.uint8))


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of a CPU tensor in its logical (row-major) order: the tensor's own memory
    when it is contiguous, else a contiguous copy."""
    view = tensor_memory(tensor)
    if view is not None:
        return view
    return _memory(tensor.detach().reshape(-1).contiguous().view(torch.uint8))


def _memory(flat: torch.Tensor) -> memoryview:
    """A 1-D uint8 CPU tensor's memory (the numpy view holds the tensor alive)."""
    array: Any = flat.numpy()
    return memoryview(array).cast("B")
