"""A checked batch of page copies between two tensor storages, run a range of layers at a time.

A storage's bytes, seen as rows for copying, are a [layers x parts, pages, words] tensor (parts:
K and V, or the MLA latent; see `TensorStorage.rows`). A batch pairs source pages with
destination pages; the plan, made once per batch and used for every range of layers, splits
the pairs into segments that each move with one tensor op (two when buffered), along dim 1,
for all the layers of the range at once:

  * `_Slice`: neighbours on both sides; one slice `copy_` (on a GPU, one cudaMemcpyAsync
    across the PCIe bus, SGLang HiCache's `direct` io backend).
  * `_Gather`: neighbours in the destination; `index_select` straight into the destination
    slice. An allocator that hands out neighbouring pages makes this the common case.
  * `_Scatter`: neighbours in the source; `index_copy_` from the source slice.
  * `_Buffered`: scattered on both sides; gathered into a small buffer, then scattered from it,
    `_BUFFER_BYTES` at a time so the buffer stays in cache. Also the whole batch when both
    storages are on one GPU (two kernels beat many small copies), and for a copy within one
    storage whose source and destination pages overlap (a layer's pages at a time: each is
    read before any is written).

Words are 8 bytes where the row width allows (a float64 view: the CPU index kernels copy wide
elements fastest, and moving a value never alters its bits).

Across a device boundary the slice copies are asynchronous on the current CUDA stream (the host
tier is pinned); whoever reads the destination waits for that stream first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from kvtier.cache.tensor_storage import KVLayout, TensorStorage

# a run of pages gets an op of its own once it holds this many bytes per layer; shorter runs
# are buffered
_MIN_RUN_BYTES = 256 << 10
# buffered pages move through at most this many bytes at a time
_BUFFER_BYTES = 2 << 20
# a worker copying layer by layer on the CPU takes enough layers at once to move this many
# bytes per op: each op costs tens of microseconds of dispatch and thread wake-ups
_CPU_OP_BYTES = 8 << 20
# ATen's parallel grain (at::internal::GRAIN_SIZE, elements). `index_select` along dim 1 copies
# each selected [rows, words] slice on one thread when the slice holds one to two grains (too
# big to share out by index, too small to split), so a group of layers avoids that band.
_ATEN_GRAIN = 32_768


def runs(pairs: list[tuple[int, int]], *, both: bool = False) -> list[list[tuple[int, int]]]:
    """`pairs` (sorted) cut where the first item stops counting up by one (with `both`, where
    either item does)."""
    out: list[list[tuple[int, int]]] = []
    for pair in pairs:
        if out and out[-1][-1][0] + 1 == pair[0] and (not both or out[-1][-1][1] + 1 == pair[1]):
            out[-1].append(pair)
        else:
            out.append([pair])
    return out


@dataclass(frozen=True, slots=True)
class _Slice:
    src_start: int
    dst_start: int
    length: int

    def run(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        rows = src.narrow(1, self.src_start, self.length)
        out = dst.narrow(1, self.dst_start, self.length)
        if src.device == dst.device:
            out.copy_(rows)
        else:
            _copy_by_row(rows, out)


@dataclass(frozen=True, slots=True)
class _Gather:
    src_idx: torch.Tensor  # on the source's device
    dst_start: int

    def run(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        import torch

        out = dst.narrow(1, self.dst_start, self.src_idx.numel())
        if src.device == dst.device:
            torch.index_select(src, 1, self.src_idx, out=out)
        else:
            _copy_by_row(src.index_select(1, self.src_idx), out)


@dataclass(frozen=True, slots=True)
class _Scatter:
    src_start: int
    dst_idx: torch.Tensor  # on the destination's device

    def run(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        rows = src.narrow(1, self.src_start, self.dst_idx.numel())
        dst.index_copy_(1, self.dst_idx, rows.to(dst.device))


@dataclass(frozen=True, slots=True)
class _Buffered:
    """Pages moved as rows of [rows x pages, words] matrices, `rows_at_once` rows at a time."""

    src_pages: torch.Tensor  # on the source's device
    dst_pages: torch.Tensor  # on the destination's device
    rows_at_once: int
    src_buffer: torch.Tensor  # bytes for `rows_at_once` of the widest rows, source's device
    dst_buffer: torch.Tensor | None  # the same on the destination's device, if another
    # flat row indices, by the number of rows of the tensors moved
    _flat: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def run(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        import torch

        src_idx, dst_idx = self._flat_rows(src, dst)
        src, dst = src.flatten(0, 1), dst.flatten(0, 1)
        step = self.rows_at_once
        for first in range(0, src_idx.numel(), step):
            some = src_idx[first : first + step]
            rows = _rows_of(self.src_buffer, src, some.numel())
            torch.index_select(src, 0, some, out=rows)
            if self.dst_buffer is not None:
                rows = _rows_of(self.dst_buffer, dst, some.numel()).copy_(rows)
            dst.index_copy_(0, dst_idx[first : first + step], rows)

    def _flat_rows(self, src: torch.Tensor, dst: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Row r of page p is row r * pages + p; rows in order, so a chunk of a multiple of
        the page count holds whole rows."""
        import torch

        flat = self._flat.get(src.shape[0])
        if flat is None:

            def rows(pages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
                first = torch.arange(like.shape[0], device=like.device) * like.shape[1]
                return (first[:, None] + pages[None, :]).flatten()

            flat = rows(self.src_pages, src), rows(self.dst_pages, dst)
            self._flat[src.shape[0]] = flat
        return flat


def _copy_by_row(src: torch.Tensor, dst: torch.Tensor) -> None:
    """Across the PCIe bus: one asynchronous contiguous copy per row (a strided copy between
    devices would go through temporaries). A pageable source is staged before the call
    returns, so a temporary `src` may be freed right after."""
    for row in range(src.shape[0]):
        dst[row].copy_(src[row], non_blocking=True)


def _rows_of(buffer: torch.Tensor, like: torch.Tensor, n: int) -> torch.Tensor:
    """`n` rows of `like` ([rows, words]), in `buffer` (flat bytes)."""
    words = like.shape[1]
    return buffer[: n * words * like.element_size()].view(like.dtype).view(n, words)


_Segment = _Slice | _Gather | _Scatter | _Buffered


@dataclass(frozen=True, slots=True)
class PageCopy:
    """Pages of `src` to pages of `dst` (same layout, indices checked), a range of layers per
    call."""

    src: TensorStorage
    dst: TensorStorage
    segments: tuple[_Segment, ...]
    num_pages: int

    @classmethod
    def plan(
        cls, src: TensorStorage, src_pages: list[int], dst: TensorStorage, dst_pages: list[int]
    ) -> PageCopy:
        """Plan a copy of checked page indices (`TensorStorage.plan_copy` checks them)."""
        whole_batch = (src.device == dst.device and src.device.type == "cuda") or (
            src is dst and not set(src_pages).isdisjoint(dst_pages)
        )
        if whole_batch:
            # a layer's pages at once: every source page of the layer read before any write
            at_once = src.layout.parts * len(src_pages)
            segments: tuple[_Segment, ...] = (_buffered(src, src_pages, dst, dst_pages, at_once),)
        else:
            pairs = list(zip(src_pages, dst_pages, strict=True))
            segments = _segments(src, dst, pairs, min_run_pages(src.layout))
        return cls(src, dst, segments, len(src_pages))

    @property
    def num_layers(self) -> int:
        return self.src.layout.num_layers

    @property
    def layers_at_once(self) -> int:
        """Layers a worker copies per call, landing together: one on a GPU; on the CPU enough
        for `_CPU_OP_BYTES` per op."""
        if "cuda" in (self.src.device.type, self.dst.device.type):
            return 1
        layer_bytes = max(1, self.num_pages * _row_bytes(self.src.layout))
        layers = max(1, min(self.num_layers, -(-_CPU_OP_BYTES // layer_bytes)))
        data, _ = self.src.rows(0, 1)
        slice_elements = data.shape[0] * data.shape[2]  # one page of one layer, all parts
        while layers < self.num_layers and 1 <= layers * slice_elements // _ATEN_GRAIN < 2:
            layers += 1
        return layers

    def copy_all_layers(self) -> None:
        self.copy_layers(0, self.num_layers)

    def copy_layers(self, first: int, end: int) -> None:
        """Copy layers [first, end) of every page in the batch (data, and FP8 scales)."""
        src_data, src_scales = self.src.rows(first, end)
        dst_data, dst_scales = self.dst.rows(first, end)
        for segment in self.segments:
            segment.run(src_data, dst_data)
        if src_scales is not None and dst_scales is not None:
            for segment in self.segments:
                segment.run(src_scales, dst_scales)


Pairs = list[tuple[int, int]]  # (source page, destination page)


@dataclass(frozen=True, slots=True)
class Cut:
    """A batch's pairs by how they move (each run sorted on its consecutive side)."""

    slices: list[Pairs]  # runs of neighbours on both sides
    gathers: list[Pairs]  # runs of neighbours in the destination
    scatters: list[Pairs]  # runs of neighbours in the source
    rest: Pairs  # the pairs left: buffered


def cut(pairs: Pairs, min_run: int) -> Cut:
    """Runs of at least `min_run` neighbours on both sides first; the other pairs cut along
    whichever side has fewer runs, the destination's (gathers) or the source's (scatters);
    pairs left in shorter runs are the rest."""
    slices: list[Pairs] = []
    rest: Pairs = []
    for run in runs(sorted(pairs), both=True):
        if len(run) >= min_run:
            slices.append(run)
        else:
            rest.extend(run)  # stays sorted on the source
    by_dst = [[(s, d) for d, s in run] for run in runs(sorted((d, s) for s, d in rest))]
    by_src = runs(rest)
    along_dst = len(by_dst) <= len(by_src)
    gathers: list[Pairs] = []
    scatters: list[Pairs] = []
    rest = []
    for run in by_dst if along_dst else by_src:
        if len(run) < min_run:
            rest.extend(run)
        else:
            (gathers if along_dst else scatters).append(run)
    return Cut(slices, gathers, scatters, rest)


def _segments(
    src: TensorStorage, dst: TensorStorage, pairs: Pairs, min_run: int
) -> tuple[_Segment, ...]:
    import torch

    def on(storage: TensorStorage, pages: list[int]) -> torch.Tensor:
        return torch.tensor(pages, dtype=torch.int64, device=storage.device)

    plan = cut(pairs, min_run)
    segments: list[_Segment] = [_Slice(run[0][0], run[0][1], len(run)) for run in plan.slices]
    segments += [_Gather(on(src, [s for s, _ in run]), run[0][1]) for run in plan.gathers]
    segments += [_Scatter(run[0][0], on(dst, [d for _, d in run])) for run in plan.scatters]
    if plan.rest:
        at_once = max(1, _BUFFER_BYTES * src.layout.parts // _row_bytes(src.layout))
        src_pages, dst_pages = [s for s, _ in plan.rest], [d for _, d in plan.rest]
        segments.append(_buffered(src, src_pages, dst, dst_pages, at_once))
    return tuple(segments)


def _row_bytes(layout: KVLayout) -> int:
    """Bytes of one page in one layer, all parts (its FP8 scale rows are narrower)."""
    return layout.page_elements // layout.num_layers * layout.dtype.itemsize


def min_run_pages(layout: KVLayout) -> int:
    """The shortest run of neighbouring pages that gets an op of its own."""
    return max(1, -(-_MIN_RUN_BYTES // _row_bytes(layout)))


def _buffered(
    src: TensorStorage, src_pages: list[int], dst: TensorStorage, dst_pages: list[int], at_once: int
) -> _Buffered:
    import torch

    at_once = max(1, min(at_once, src.layout.num_layers * src.layout.parts * len(src_pages)))
    nbytes = at_once * _row_bytes(src.layout) // src.layout.parts
    src_buffer = torch.empty(nbytes, dtype=torch.uint8, device=src.device)
    dst_buffer = None
    if dst.device != src.device:
        dst_buffer = torch.empty(nbytes, dtype=torch.uint8, device=dst.device)
    return _Buffered(
        torch.tensor(src_pages, dtype=torch.int64, device=src.device),
        torch.tensor(dst_pages, dtype=torch.int64, device=dst.device),
        at_once,
        src_buffer,
        dst_buffer,
    )


def words(rows: torch.Tensor) -> torch.Tensor:
    """Contiguous `rows` ([rows, pages, ...]) as [rows, pages, words] of 8 bytes (or the
    widest word the row width and alignment allow): a view."""
    import torch

    flat = rows.view(rows.shape[0], rows.shape[1], -1)
    row_bytes = flat.shape[2] * flat.element_size()
    for dtype in (torch.float64, torch.float32):
        width = dtype.itemsize
        if row_bytes % width == 0 and flat.data_ptr() % width == 0:
            return flat if flat.dtype == dtype else flat.view(torch.uint8).view(dtype)
    return flat
