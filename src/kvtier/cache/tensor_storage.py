"""Real KV bytes for one tier: torch tensors laid out layer-first, indexed by page.

Layouts (the host pool's `layer_first` layout of SGLang HiCache, paged):

    MHA/GQA  data[layers, 2, pages, page_size, kv_heads, head_dim]    (2: K, V)
    MLA      data[layers, pages, page_size, latent_dim]               (latent = kv_lora_rank + rope)

One layer's slice holds every page of that layer, so a batch of pages moves one layer at a time
(`kvtier.cache.page_copy`) and a consumer can start on layer i while later layers are still in
flight. FP8 data is stored as uint8 bits with a float32 scale
per layer, per K/V part and per page (`scales[layers, 2, pages]`, MLA `scales[layers, pages]`);
see `kvtier.cache.quant`.

The device tier lives on CUDA when a GPU is present and on the CPU otherwise (the tier is then
logical); the host tier is pinned when CUDA is present, so host->device copies can overlap.

A serialized page (`read_page_bytes`) is a header, the page's elements for every layer in the
order [layers, (2,) page_size, (kv_heads,) dim], then its FP8 scales [layers, (2)]:

    | "KVTP" | layout digest (8) | elements (layers x parts x page elements) | scales (FP8) |
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.cache import quant
from kvtier.cache.page_copy import PageCopy, words
from kvtier.cache.quant import StorageFormat
from kvtier.cache.storage import PageStorage, Tier
from kvtier.errors import UnsupportedModel
from kvtier.model.description import AttentionKind, KVGeometry

if TYPE_CHECKING:
    import torch

    Pages = Sequence[int] | torch.Tensor

_MAGIC = b"KVTP"
_HEADER_LEN = len(_MAGIC) + 8


@dataclass(frozen=True, slots=True)
class KVLayout:
    """Shape and element format of one rank's paged KV cache."""

    kind: AttentionKind
    num_layers: int
    page_size: int
    num_kv_heads: int  # per rank; 1 for MLA
    head_dim: int  # MHA: K and V head dim; MLA: latent width
    dtype: StorageFormat

    @classmethod
    def from_geometry(
        cls, kv: KVGeometry, *, page_size: int, dtype: str = "bfloat16", tp: int = 1
    ) -> KVLayout:
        """The layout one tensor-parallel rank holds for a model's KV geometry."""
        if page_size < 1 or tp < 1:
            raise ValueError("page_size and tp must be positive")
        if not kv.is_uniform:
            raise UnsupportedModel("KV tensor storage of layers of two shapes (Gemma 4)")
        if kv.kind is AttentionKind.MLA:
            width = kv.kv_lora_rank + kv.qk_rope_head_dim if kv.kv_lora_rank else kv.head_dim
            return cls(kv.kind, kv.num_layers, page_size, 1, width, quant.storage_format(dtype))
        if kv.v_head_dim != kv.head_dim:
            raise UnsupportedModel(
                f"KV tensor storage needs equal K and V head dims, got {kv.head_dim} and "
                f"{kv.v_head_dim}"
            )
        heads = kv.kv_heads_per_rank(tp)
        return cls(
            kv.kind, kv.num_layers, page_size, heads, kv.head_dim, quant.storage_format(dtype)
        )

    @property
    def parts(self) -> int:
        """Tensors per layer: K and V for MHA, the latent for MLA."""
        return 1 if self.kind is AttentionKind.MLA else 2

    @property
    def token_shape(self) -> tuple[int, ...]:
        """Shape of one token's K (or V, or latent) in one layer."""
        if self.kind is AttentionKind.MLA:
            return (self.head_dim,)
        return (self.num_kv_heads, self.head_dim)

    def buffer_shape(self, num_pages: int) -> tuple[int, ...]:
        parts = () if self.kind is AttentionKind.MLA else (2,)
        return (self.num_layers, *parts, num_pages, self.page_size, *self.token_shape)

    def scale_shape(self, num_pages: int) -> tuple[int, ...]:
        parts = () if self.kind is AttentionKind.MLA else (2,)
        return (self.num_layers, *parts, num_pages)

    @property
    def page_elements(self) -> int:
        """Elements of one page across all layers and parts."""
        per_token = 1
        for n in self.token_shape:
            per_token *= n
        return self.num_layers * self.parts * self.page_size * per_token

    @property
    def page_scale_count(self) -> int:
        return self.num_layers * self.parts if self.dtype.is_fp8 else 0

    @property
    def page_nbytes(self) -> int:
        """Bytes of one page in the tier (elements plus FP8 scales), without a blob header."""
        return self.page_elements * self.dtype.itemsize + 4 * self.page_scale_count

    def digest(self) -> bytes:
        text = (
            f"{self.kind}|{self.num_layers}|{self.page_size}|{self.num_kv_heads}|"
            f"{self.head_dim}|{self.dtype.name}"
        )
        return hashlib.blake2b(text.encode(), digest_size=8).digest()


def default_device(tier: Tier) -> torch.device:
    """CUDA for the device tier when a GPU is present; the CPU otherwise and for the host tier."""
    import torch

    if tier is Tier.DEVICE and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


class TensorStorage:
    """A tier's pages as torch tensors; implements `PageStorage`."""

    def __init__(
        self, layout: KVLayout, num_pages: int, tier: Tier, device: str | None = None
    ) -> None:
        import torch

        if tier is Tier.STORE:
            raise ValueError("tensor storage holds the device or host tier; L3 uses a store")
        if num_pages < 1:
            raise ValueError("a storage needs at least one page")
        self.layout = layout
        self.tier = tier
        self.num_pages = num_pages
        self.device = torch.device(device) if device else default_device(tier)
        pin = tier is Tier.HOST and self.device.type == "cpu" and torch.cuda.is_available()
        self.data = torch.zeros(
            layout.buffer_shape(num_pages),
            dtype=layout.dtype.storage_dtype(),
            device=self.device,
            pin_memory=pin,
        )
        self.scales: torch.Tensor | None = None
        if layout.dtype.is_fp8:
            zero = torch.zeros((), dtype=torch.float32)
            self.scales = torch.full(
                layout.scale_shape(num_pages),
                float(quant.page_scales(zero, layout.dtype)),
                dtype=torch.float32,
                device=self.device,
                pin_memory=pin,
            )
        # page axis of one layer's slice data[layer]
        self._page_dim = 0 if layout.kind is AttentionKind.MLA else 1
        # views made once: a copy asks for every layer's parts, and indexing costs microseconds
        self._parts = [
            [self._make_part(layer, part) for part in range(layout.parts)]
            for layer in range(layout.num_layers)
        ]
        # every layer's parts as rows of pages, for page copies
        rows = layout.num_layers * layout.parts
        self._rows = words(self.data.view(rows, num_pages, -1))
        self._scale_rows = None if self.scales is None else self.scales.view(rows, num_pages, 1)

    # -- page movement ------------------------------------------------------------------------

    def check_copy(
        self, src_pages: Pages, dst: PageStorage, dst_pages: Pages
    ) -> tuple[list[int], TensorStorage, list[int]]:
        """Check a copy of pages into `dst`: raises ValueError on a bad batch; returns the
        arguments of `PageCopy.plan` after `self` (cheap, no tensor ops)."""
        if not isinstance(dst, TensorStorage) or dst.layout != self.layout:
            raise ValueError("page copies need two tensor storages with the same KV layout")
        if len(src_pages) != len(dst_pages):
            raise ValueError("source and destination page counts differ")
        return self._pages(src_pages), dst, dst._pages(dst_pages, unique=True)

    def plan_copy(self, src_pages: Pages, dst: PageStorage, dst_pages: Pages) -> PageCopy:
        """Check a copy of pages into `dst` and plan it; run it with `PageCopy.copy_layers`."""
        return PageCopy.plan(self, *self.check_copy(src_pages, dst, dst_pages))

    def copy_pages(self, src_pages: Pages, dst: PageStorage, dst_pages: Pages) -> None:
        import torch

        copy = self.plan_copy(src_pages, dst, dst_pages)
        copy.copy_all_layers()
        if "cuda" in (self.device.type, copy.dst.device.type):
            torch.cuda.current_stream().synchronize()  # the protocol's copy is synchronous

    def read_page_bytes(self, pages: Pages) -> list[bytes]:
        import torch

        idx = self._index(pages)
        n = int(idx.numel())
        if n == 0:
            return []
        dim = self._page_dim + 1
        elements = self.data.index_select(dim, idx).movedim(dim, 0).contiguous().cpu()
        element_bytes = elements.view(n, -1).view(torch.uint8)
        scale_bytes = None
        if self.scales is not None:
            scales = self.scales.index_select(dim, idx).movedim(dim, 0).contiguous().cpu()
            scale_bytes = scales.view(n, -1).view(torch.uint8)
        header = _MAGIC + self.layout.digest()
        blobs = []
        for i in range(n):
            blob = header + _tensor_bytes(element_bytes[i])
            if scale_bytes is not None:
                blob += _tensor_bytes(scale_bytes[i])
            blobs.append(blob)
        return blobs

    def write_page_bytes(self, pages: Pages, blobs: Sequence[bytes]) -> None:
        import torch

        if len(pages) != len(blobs):
            raise ValueError("page and blob counts differ")
        idx = self._index(pages, unique=True)
        n = len(blobs)
        if n == 0:
            return
        header = _MAGIC + self.layout.digest()
        size = _HEADER_LEN + self.layout.page_nbytes
        for blob in blobs:
            if len(blob) != size or blob[:_HEADER_LEN] != header:
                raise ValueError("page blob was not written by a storage with this KV layout")
        raw = torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8).view(n, size)
        split = _HEADER_LEN + self.layout.page_elements * self.layout.dtype.itemsize
        dim = self._page_dim + 1
        per_page = self.data.shape[:dim] + self.data.shape[dim + 1 :]
        elements = raw[:, _HEADER_LEN:split].contiguous().view(self.data.dtype)
        elements = elements.view(n, *per_page).movedim(0, dim).to(self.device)
        self.data.index_copy_(dim, idx, elements)
        if self.scales is not None:
            scales = raw[:, split:].contiguous().view(torch.float32)
            scales = scales.view(n, *self.scales.shape[:dim]).movedim(0, dim).to(self.device)
            self.scales.index_copy_(dim, idx, scales)

    # -- model accessors ----------------------------------------------------------------------

    def write_kv(self, layer: int, slots: Pages, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store K and V of tokens at `slots` (page * page_size + offset) of `layer`.

        `k` and `v` are [tokens, kv_heads, head_dim]; FP8 storages quantize them.
        """
        self._require(AttentionKind.MHA)
        self._write_part(layer, 0, slots, k)
        self._write_part(layer, 1, slots, v)

    def read_kv(self, layer: int, pages: Pages) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of every token of `pages` in `layer`, [pages * page_size, kv_heads, head_dim].

        The storage dtype for bf16/fp16/fp32; float32 (dequantized) for FP8.
        """
        self._require(AttentionKind.MHA)
        return self._read_part(layer, 0, pages), self._read_part(layer, 1, pages)

    def write_latent(self, layer: int, slots: Pages, latent: torch.Tensor) -> None:
        """Store the MLA latent ([tokens, latent_dim]) of tokens at `slots` of `layer`."""
        self._require(AttentionKind.MLA)
        self._write_part(layer, 0, slots, latent)

    def read_latent(self, layer: int, pages: Pages) -> torch.Tensor:
        """The MLA latent of every token of `pages` in `layer`, [pages * page_size, latent_dim]."""
        self._require(AttentionKind.MLA)
        return self._read_part(layer, 0, pages)

    # -- internals ----------------------------------------------------------------------------

    def _require(self, kind: AttentionKind) -> None:
        if self.layout.kind is not kind:
            raise ValueError(f"this storage holds a {self.layout.kind} cache, not {kind}")

    def _pages(self, pages: Pages, *, unique: bool = False) -> list[int]:
        """`pages` as a checked list of ints (the checks of `_index`, without tensor ops)."""
        out = pages.tolist() if hasattr(pages, "tolist") else [int(p) for p in pages]
        if out and (min(out) < 0 or max(out) >= self.num_pages):
            raise ValueError(f"index out of range [0, {self.num_pages})")
        if unique and len(set(out)) != len(out):
            raise ValueError("destination indices repeat")
        return out

    def _index(
        self, pages: Pages, *, limit: int | None = None, unique: bool = False
    ) -> torch.Tensor:
        import torch

        limit = self.num_pages if limit is None else limit
        if not isinstance(pages, torch.Tensor) and hasattr(pages, "tolist"):
            pages = pages.tolist()  # a Pages run: its indices, not one element at a time
        idx = torch.as_tensor(pages, dtype=torch.int64).reshape(-1).to(self.device)
        if idx.numel():
            if int(idx.min()) < 0 or int(idx.max()) >= limit:
                raise ValueError(f"index out of range [0, {limit})")
            if unique and int(torch.unique(idx).numel()) != idx.numel():
                raise ValueError("destination indices repeat")
        return idx

    def part(self, layer: int, part: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Data [pages, page_size, *token_shape] and FP8 scales [pages] of one layer's K (part
        0), V (part 1) or MLA latent (part 0); views into the storage."""
        if not 0 <= layer < self.layout.num_layers:
            raise ValueError(f"layer {layer} out of range [0, {self.layout.num_layers})")
        return self._parts[layer][part]

    def rows(self, first: int, end: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Layers [first, end) as rows for page copies: data [layers x parts, pages, words]
        (see `page_copy.words`) and FP8 scales [layers x parts, pages, 1]; views."""
        parts = self.layout.parts
        data = self._rows[first * parts : end * parts]
        scales = None if self._scale_rows is None else self._scale_rows[first * parts : end * parts]
        return data, scales

    def _make_part(self, layer: int, part: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.layout.kind is AttentionKind.MLA:
            return self.data[layer], None if self.scales is None else self.scales[layer]
        return self.data[layer, part], None if self.scales is None else self.scales[layer, part]

    def _write_part(self, layer: int, part: int, slots: Pages, x: torch.Tensor) -> None:
        import torch

        data, scales = self.part(layer, part)
        page_size = self.layout.page_size
        idx = self._index(slots, limit=self.num_pages * page_size, unique=True)
        if tuple(x.shape) != (idx.numel(), *self.layout.token_shape):
            raise ValueError(
                f"expected values of shape {(idx.numel(), *self.layout.token_shape)}, "
                f"got {tuple(x.shape)}"
            )
        flat = data.view(self.num_pages * page_size, *self.layout.token_shape)
        x = x.to(self.device)
        if scales is None:
            flat.index_copy_(0, idx, x.to(self.data.dtype))
            return
        fmt = self.layout.dtype
        pages, inverse = torch.unique(idx // page_size, return_inverse=True)
        token_amax = x.to(torch.float32).abs().reshape(idx.numel(), -1).amax(dim=1)
        amax = torch.zeros(pages.numel(), dtype=torch.float32, device=self.device)
        amax.scatter_reduce_(0, inverse, token_amax, reduce="amax")
        filled = torch.bincount(inverse, minlength=pages.numel()) == page_size
        old = scales[pages]
        needed = quant.page_scales(amax, fmt)
        # a write covering a whole page starts its scale afresh; a partial one may only raise it
        new = torch.where(filled, needed, torch.maximum(old, needed))
        grow = ~filled & (new > old)
        if bool(grow.any()):
            grown = pages[grow]
            shape = (-1,) + (1,) * (data.dim() - 1)
            values = quant.dequantize(data[grown], old[grow].view(shape), fmt)
            data[grown] = quant.quantize(values, new[grow].view(shape), fmt)
        scales[pages] = new
        token_scale = new[inverse].view((-1,) + (1,) * len(self.layout.token_shape))
        flat.index_copy_(0, idx, quant.quantize(x, token_scale, fmt))

    def _read_part(self, layer: int, part: int, pages: Pages) -> torch.Tensor:
        data, scales = self.part(layer, part)
        idx = self._index(pages)
        rows = data.index_select(0, idx)
        if scales is not None:
            shape = (-1,) + (1,) * (rows.dim() - 1)
            page_scale = scales.index_select(0, idx).view(shape)
            rows = quant.dequantize(rows, page_scale, self.layout.dtype)
        return rows.reshape(-1, *self.layout.token_shape)


def _tensor_bytes(t: torch.Tensor) -> bytes:
    """Bytes of a contiguous CPU uint8 tensor (a direct memory copy; no numpy needed)."""
    return ctypes.string_at(t.data_ptr(), t.numel())
