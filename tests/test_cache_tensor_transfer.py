"""The asynchronous transfer engine: layer-by-layer progress, ordering, errors, shutdown."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pytest
import torch

from cache_tensor_support import DEVICES, fill_random_bits, gqa_geometry, mla_geometry, tiers
from kvtier.cache import page_copy, quant
from kvtier.cache.page_copy import PageCopy
from kvtier.cache.storage import AccountingStorage, PageStorage, Tier
from kvtier.cache.tensor_storage import KVLayout
from kvtier.cache.transfer import AsyncTransfer, TransferError


@pytest.fixture
def engine() -> Iterator[AsyncTransfer]:
    with AsyncTransfer() as transfer:
        yield transfer


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("geometry", [gqa_geometry(), mla_geometry()], ids=["gqa", "mla"])
def test_evict_and_load_back_is_bit_exact(engine, device, dtype, geometry) -> None:
    layout = KVLayout.from_geometry(geometry, page_size=4, dtype=dtype)
    dev, host = tiers(layout, device)
    fill_random_bits(dev, seed=7)
    original = dev.read_page_bytes([1, 4, 6])
    engine.submit(dev, [1, 4, 6], host, [0, 15, 3]).wait()
    fill_random_bits(dev, seed=8)  # the device pages are reused by others meanwhile
    assert dev.read_page_bytes([1, 4, 6]) != original
    engine.submit(host, [0, 15, 3], dev, [2, 7, 5]).wait()
    assert dev.read_page_bytes([2, 7, 5]) == original


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_evict_and_load_back_keeps_bits_and_bound(engine, device, dtype) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4, dtype=dtype)
    dev, host = tiers(layout, device)
    torch.manual_seed(3)
    k = torch.randn(3, 8, 4, 16) * torch.tensor([1e-2, 1.0, 1e2]).view(3, 1, 1, 1)
    v = torch.randn(3, 8, 4, 16)
    for layer in range(3):
        dev.write_kv(layer, list(range(8)), k[layer], v[layer])
    original = dev.read_page_bytes([0, 1])
    engine.submit(dev, [0, 1], host, [5, 6]).wait()
    dev.write_kv(0, list(range(8)), torch.zeros(8, 4, 16), torch.zeros(8, 4, 16))
    engine.submit(host, [5, 6], dev, [2, 3]).wait()
    assert dev.read_page_bytes([2, 3]) == original
    assert dev.scales is not None
    for layer in range(3):
        rk, rv = dev.read_kv(layer, [2, 3])
        for got, want, part in ((rk, k[layer], 0), (rv, v[layer], 1)):
            scale = dev.scales[layer, part, 2:4].cpu().repeat_interleave(4).view(8, 1, 1)
            bound = quant.error_bound(want, scale, layout.dtype)
            assert bool(((got.cpu() - want).abs() <= bound).all())


class _Gate:
    """Holds a layer's copy until the test opens the gate."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold_layer: int) -> None:
        self.reached = threading.Event()
        self.opened = threading.Event()
        copy_layers = PageCopy.copy_layers

        def gated(copy: PageCopy, first: int, end: int) -> None:
            if first <= hold_layer < end:
                self.reached.set()
                assert self.opened.wait(10)
            copy_layers(copy, first, end)

        monkeypatch.setattr(PageCopy, "copy_layers", gated)


@pytest.mark.parametrize("layers_at_once", [1, 2])
def test_layers_land_in_order_and_can_be_consumed_early(
    engine, monkeypatch, layers_at_once: int
) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(layers=4), page_size=4)
    dev, host = tiers(layout, "cpu")
    fill_random_bits(host, seed=1)
    # two pages of one layer: layers_at_once of them make one op
    op_bytes = layers_at_once * 2 * layout.page_nbytes // layout.num_layers
    monkeypatch.setattr(page_copy, "_CPU_OP_BYTES", op_bytes)
    assert host.plan_copy([0, 1], dev, [4, 5]).layers_at_once == layers_at_once
    gate = _Gate(monkeypatch, hold_layer=2)
    handle = engine.submit(host, [0, 1], dev, [4, 5])
    assert gate.reached.wait(10)
    handle.wait_layer(0)
    handle.wait_layer(1)
    assert torch.equal(
        dev.data[1, :, 4:6].view(torch.uint8), host.data[1, :, 0:2].view(torch.uint8)
    )
    assert not bool(dev.data[3].any())  # layer 3 has not been copied yet
    assert not handle.done()
    gate.opened.set()
    handle.wait()
    assert handle.done()
    assert dev.read_page_bytes([4, 5]) == host.read_page_bytes([0, 1])


def test_batches_run_in_submission_order(engine) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4)
    dev, host = tiers(layout, "cpu")
    fill_random_bits(dev, seed=5)
    want = dev.read_page_bytes([0])
    # evict page 0, then load the host copy into page 3: only the second handle is waited on
    engine.submit(dev, [0], host, [9])
    engine.submit(host, [9], dev, [3]).wait()
    assert dev.read_page_bytes([3]) == want


class _Broken(AccountingStorage):
    def copy_pages(
        self, src_pages: Sequence[int], dst: PageStorage, dst_pages: Sequence[int]
    ) -> None:
        raise OSError("disk on fire")


def test_worker_errors_surface_on_wait_and_the_engine_carries_on(engine) -> None:
    broken = engine.submit(_Broken(Tier.HOST, 4), [0], AccountingStorage(Tier.DEVICE, 4), [1])
    with pytest.raises(TransferError) as info:
        broken.wait()
    assert isinstance(info.value.__cause__, OSError)
    assert broken.done()
    with pytest.raises(TransferError):
        broken.wait_layer(0)
    src, dst = AccountingStorage(Tier.HOST, 4), AccountingStorage(Tier.DEVICE, 4)
    fine = engine.submit(src, [0], dst, [1])
    fine.wait_layer(31)  # no layers: any layer means the whole batch
    assert fine.done() and fine.num_layers == 1


def test_an_error_mid_batch_keeps_the_layers_that_landed(engine, monkeypatch) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(layers=3), page_size=4)
    dev, host = tiers(layout, "cpu")
    monkeypatch.setattr(page_copy, "_CPU_OP_BYTES", 1)  # one layer per op
    copy_layers = PageCopy.copy_layers

    def fail_on_layer_2(copy: PageCopy, first: int, end: int) -> None:
        if first <= 2 < end:
            raise RuntimeError("lost the bus")
        copy_layers(copy, first, end)

    monkeypatch.setattr(PageCopy, "copy_layers", fail_on_layer_2)
    handle = engine.submit(dev, [0], host, [0])
    with pytest.raises(TransferError, match="page copy failed"):
        handle.wait()
    handle.wait_layer(1)
    with pytest.raises(TransferError):
        handle.wait_layer(2)


def test_bad_batches_are_refused_at_submit(engine) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4)
    dev, host = tiers(layout, "cpu")
    with pytest.raises(ValueError, match="out of range"):
        engine.submit(dev, [0], host, [16])
    with pytest.raises(ValueError, match="counts differ"):
        engine.submit(AccountingStorage(Tier.DEVICE, 2), [0, 1], host, [0])
    with pytest.raises(ValueError, match=r"layer 3 out of range \[0, 3\)"):
        engine.submit(dev, [0], host, [0]).wait_layer(3)


def test_close_drains_the_queue_then_refuses_work(monkeypatch) -> None:
    layout = KVLayout.from_geometry(gqa_geometry(), page_size=4)
    dev, host = tiers(layout, "cpu")
    fill_random_bits(dev, seed=9)
    gate = _Gate(monkeypatch, hold_layer=0)
    engine = AsyncTransfer()
    handles = [engine.submit(dev, [p], host, [p]) for p in range(8)]
    assert gate.reached.wait(10)
    closer = threading.Thread(target=engine.close)
    closer.start()
    gate.opened.set()
    closer.join(10)
    assert not closer.is_alive()
    assert all(h.done() for h in handles)
    assert host.read_page_bytes(range(8)) == dev.read_page_bytes(range(8))
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit(dev, [0], host, [0])
    engine.close()  # closing twice is harmless
