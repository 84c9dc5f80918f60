"""A checked batch of page copies between two tensor storages, run one layer at a time.

A layer's pages move one of two ways:

  * by runs: the (source, destination) pairs are sorted and grouped into runs consecutive on
    both sides; each run of each K/V part is one contiguous copy: a memmove between host
    buffers (it releases the GIL, and costs a fraction of a tensor op's dispatch), a
    cudaMemcpyAsync `copy_` across the PCIe bus (SGLang HiCache's `direct` io backend). Every
    byte is read and written once; allocators that hand out neighbouring pages make runs long.
  * by gather/scatter: `index_select` then `index_copy_`, when both storages are on the same
    GPU, where two kernels beat many small copies, and for a copy within one storage whose
    source and destination pages overlap (it reads every source page before writing).

Across a device boundary the copies are asynchronous on the current CUDA stream (the host tier
is pinned); whoever reads the destination waits for that stream first.
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from kvtier.cache.tensor_storage import TensorStorage


@cache
def _layer_pool() -> ThreadPoolExecutor:
    """Threads that copy whole layers of a host-to-host batch at once: memmove releases the GIL,
    and one thread of memmoves cannot reach the bandwidth of a multi-threaded contiguous copy."""
    return ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)))


def page_runs(src_pages: list[int], dst_pages: list[int]) -> tuple[tuple[int, int, int], ...]:
    """(source start, destination start, length) of runs consecutive on both sides."""
    runs: list[list[int]] = []
    for s, d in sorted(zip(src_pages, dst_pages, strict=True)):
        last = runs[-1] if runs else None
        if last is not None and last[0] + last[2] == s and last[1] + last[2] == d:
            last[2] += 1
        else:
            runs.append([s, d, 1])
    return tuple((s, d, n) for s, d, n in runs)


@dataclass(frozen=True, slots=True)
class PageCopy:
    """Pages of `src` to pages of `dst` (same layout, indices checked), one layer per call."""

    src: TensorStorage
    dst: TensorStorage
    runs: tuple[tuple[int, int, int], ...]
    src_idx: torch.Tensor | None  # gather/scatter only
    dst_idx: torch.Tensor | None

    @classmethod
    def plan(
        cls, src: TensorStorage, src_idx: torch.Tensor, dst: TensorStorage, dst_idx: torch.Tensor
    ) -> PageCopy:
        src_pages, dst_pages = src_idx.tolist(), dst_idx.tolist()
        same_gpu = src.device == dst.device and src.device.type == "cuda"
        if same_gpu or (src is dst and not set(src_pages).isdisjoint(dst_pages)):
            return cls(src, dst, (), src_idx, dst_idx)
        return cls(src, dst, page_runs(src_pages, dst_pages), None, None)

    @property
    def num_layers(self) -> int:
        return self.src.layout.num_layers

    @property
    def layers_at_once(self) -> int:
        """How many layers to copy at once: host-to-host runs go to the layer pool's threads."""
        host_to_host = self.src.device.type == "cpu" and self.dst.device.type == "cpu"
        if not host_to_host or self.src_idx is not None or len(self.runs) < 8:
            return 1
        return _layer_pool()._max_workers

    def copy_layers(self, layers: range) -> None:
        """Copy `layers` concurrently (the first on this thread, the rest on the layer pool)."""
        futures = [_layer_pool().submit(self.copy_layer, layer) for layer in layers[1:]]
        self.copy_layer(layers[0])
        for done in futures:
            done.result()

    def copy_all_layers(self) -> None:
        step = self.layers_at_once
        for first in range(0, self.num_layers, step):
            self.copy_layers(range(first, min(first + step, self.num_layers)))

    def copy_layer(self, layer: int) -> None:
        """Copy `layer` of every page in the batch (data, and FP8 scales)."""
        for part in range(self.src.layout.parts):
            src_data, src_scales = self.src.part(layer, part)
            dst_data, dst_scales = self.dst.part(layer, part)
            self._copy(src_data, dst_data)
            if src_scales is not None and dst_scales is not None:
                self._copy(src_scales, dst_scales)

    def _copy(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Pages are rows (dim 0) of `src` and `dst`, both contiguous."""
        if self.src_idx is not None and self.dst_idx is not None:
            dst.index_copy_(0, self.dst_idx, src.index_select(0, self.src_idx))
        elif src.device.type == "cpu" and dst.device.type == "cpu":
            # runs were checked against both storages' page counts when the copy was planned
            row = src.stride(0) * src.element_size()
            src_at, dst_at = src.data_ptr(), dst.data_ptr()
            for s, d, n in self.runs:
                ctypes.memmove(dst_at + d * row, src_at + s * row, n * row)
        else:
            for s, d, n in self.runs:
                dst.narrow(0, d, n).copy_(src.narrow(0, s, n), non_blocking=True)
