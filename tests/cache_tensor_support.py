"""Helpers for the tensor-cache tests: devices to run on, layouts, and random page contents."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from kvtier.cache.storage import Tier
from kvtier.cache.tensor_storage import KVLayout, TensorStorage
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind

# The device tier runs on the CPU everywhere and on CUDA where a GPU is present.
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ],
    ),
]


def gqa_geometry(layers: int = 3, kv_heads: int = 4, head_dim: int = 16) -> KVGeometry:
    return KVGeometry(AttentionKind.MHA, kv_heads, head_dim, head_dim, (LayerKind.FULL,) * layers)


def mla_geometry(layers: int = 3, rank: int = 32, rope: int = 8) -> KVGeometry:
    return KVGeometry(
        AttentionKind.MLA,
        1,
        rank + rope,
        0,
        (LayerKind.FULL,) * layers,
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
    )


def tiers(
    layout: KVLayout, device: str, device_pages: int = 8, host_pages: int = 16
) -> tuple[TensorStorage, TensorStorage]:
    """A device-tier storage on `device` and a host-tier storage on the CPU."""
    return (
        TensorStorage(layout, device_pages, Tier.DEVICE, device=device),
        TensorStorage(layout, host_pages, Tier.HOST),
    )


def fill_random_bits(storage: TensorStorage, seed: int) -> None:
    """Every byte of the storage (and of its FP8 scales) random: NaN and subnormal bit patterns
    included, so a copy that converts instead of moving bytes shows up."""
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(
        0,
        256,
        (storage.data.numel() * storage.data.element_size(),),
        dtype=torch.uint8,
        generator=gen,
    )
    storage.data.view(-1).view(torch.uint8).copy_(raw)
    if storage.scales is not None:
        exps = torch.randint(-20, 20, storage.scales.shape, generator=gen)
        storage.scales.copy_(torch.ldexp(torch.ones(storage.scales.shape), exps))


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch ops on one thread: on tiny tensors its thread pool only waits (for tens of
    milliseconds per op when the CPU is shared)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
