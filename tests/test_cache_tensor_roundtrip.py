"""KV written on the device tier survives eviction to the host and load-back through TieredCache.

bf16/fp16 come back bit for bit; FP8 pages come back bit for bit too (values and scales), so
their values stay within the quantization bound of what was written.
"""

from __future__ import annotations

import pytest
import torch

from cache_tensor_support import DEVICES, gqa_geometry, mla_geometry
from kvtier.cache import Tier, TieredCache, admit, finish, page_hashes
from kvtier.cache.quant import error_bound, page_scales
from kvtier.cache.tensor_storage import KVLayout, TensorStorage
from kvtier.cache.transfer import AsyncTransfer

PAGE = 4


def _write(storage: TensorStorage, pages: list[int], seed: int) -> list[torch.Tensor]:
    """Random KV for every token of `pages`, per layer and part (values before storage)."""
    gen = torch.Generator().manual_seed(seed)
    slots = [p * PAGE + i for p in pages for i in range(PAGE)]
    layout = storage.layout
    written = []
    for layer in range(layout.num_layers):
        # a different magnitude per page: FP8 scales are per page
        size = torch.logspace(-3, 3, len(pages)).repeat_interleave(PAGE)
        parts = [
            torch.randn(len(slots), *layout.token_shape, generator=gen)
            * size.view(-1, *[1] * len(layout.token_shape))
            for _ in range(layout.parts)
        ]
        if layout.parts == 2:
            storage.write_kv(layer, slots, parts[0], parts[1])
        else:
            storage.write_latent(layer, slots, parts[0])
        written += parts
    return written


def _read(storage: TensorStorage, pages: list[int]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for layer in range(storage.layout.num_layers):
        if storage.layout.parts == 2:
            out += storage.read_kv(layer, pages)
        else:
            out.append(storage.read_latent(layer, pages))
    return [t.cpu() for t in out]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("geometry", [gqa_geometry(), mla_geometry()], ids=["gqa", "mla"])
def test_kv_survives_eviction_and_load_back(device, dtype, geometry) -> None:
    layout = KVLayout.from_geometry(geometry, page_size=PAGE, dtype=dtype)
    dev = TensorStorage(layout, 12, Tier.DEVICE, device=device)
    with AsyncTransfer() as transfer:
        cache = TieredCache(dev, TensorStorage(layout, 24, Tier.HOST), transfer)
        keys = page_hashes(list(range(6 * PAGE)), PAGE)
        adm = admit(cache, keys)
        assert adm is not None and adm.num_cached == 0
        written = _write(dev, adm.pages, seed=0)
        stored = dev.read_page_bytes(adm.pages)
        finish(cache, adm)  # write-through: a copy to the host is now in flight
        cache.flush()
        assert cache.evict(Tier.DEVICE, 12).freed == 6
        # other requests take the freed device pages and overwrite them
        other = admit(cache, page_hashes(list(range(100, 100 + 12 * PAGE)), PAGE))
        assert other is not None and sorted(other.pages) == list(range(12))
        _write(dev, other.pages, seed=1)
        finish(cache, other)
        cache.flush()

        again = admit(cache, keys)
        assert again is not None and again.host_hit == 6 and again.load is not None
        again.load.wait()
        assert dev.read_page_bytes(again.pages) == stored
        fmt = layout.dtype
        for i, (got, want) in enumerate(zip(_read(dev, again.pages), written, strict=True)):
            if not fmt.is_fp8:
                assert torch.equal(got, want.to(fmt.storage_dtype()))
                continue
            layer, part = divmod(i, layout.parts)
            scales = dev.part(layer, part)[1]
            assert scales is not None
            page_scale = scales[again.pages].cpu()
            assert torch.equal(page_scale, page_scales(want.abs().view(6, -1).amax(1), fmt))
            token_scale = page_scale.repeat_interleave(PAGE).view(-1, *[1] * (want.dim() - 1))
            assert bool(((got - want).abs() <= error_bound(want, token_scale, fmt)).all())
        finish(cache, again)
        cache.flush()
        cache.check_integrity([])
