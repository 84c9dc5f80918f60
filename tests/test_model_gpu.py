"""GPU catalog lookups."""

from __future__ import annotations

import pytest

from kvtier.errors import KvtierError
from kvtier.model.gpu import GpuSpec, gpu_catalog, resolve_gpu


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        ("h100", "H100 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("RTX PRO 6000", "RTX PRO 6000 Blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("rtx3090", "RTX 3090"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA H200 141GB", "H200"),
        ("AMD Instinct MI300X", "MI300X"),
        ("l4", "L4"),
        ("L40S", "L40S"),
    ],
)
def test_resolve_gpu_loosely(name: str, gpu: str) -> None:
    assert resolve_gpu(name).name == gpu


@pytest.mark.parametrize("name", ["H100 NVL", "RTX 4090 48GB", "a10", "tpu v5e"])
def test_unknown_or_contradictory_gpu_is_refused(name: str) -> None:
    with pytest.raises(KvtierError, match=r"unknown GPU .*; closest: \w"):
        resolve_gpu(name)


def test_memory_is_what_the_driver_reports() -> None:
    # S08 (4x RTX 4090: 24564 MiB), S09 (RTX 5080: 16303 MiB); the seed's ~95.6 GiB usable
    assert resolve_gpu("rtx 4090").memory_mib == 24564
    assert resolve_gpu("rtx 5080").memory_mib == 16303
    assert round(resolve_gpu("rtx pro 6000").memory_gib, 1) == 95.6


def test_catalog_is_complete_and_sourced() -> None:
    gpus = gpu_catalog()
    assert len(gpus) == 17
    for gpu in gpus:
        assert gpu.source and gpu.memory_mib > 0 and gpu.pcie_gen in (4, 5)
        assert gpu.hbm_gbps and gpu.bf16_dense_tflops and gpu.pcie_gbps
        assert resolve_gpu(gpu.name) is gpu


def test_custom_gpu_knows_only_its_memory() -> None:
    gpu = GpuSpec.custom(95.6)
    assert gpu.memory_mib == round(95.6 * 1024)
    assert gpu.hbm_gbps is None and gpu.pcie_gbps is None
    with pytest.raises(KvtierError):
        GpuSpec.custom(0)


def test_every_catalog_gpu_states_its_all_reduce_figures_and_whether_calibrated() -> None:
    from kvtier.model.gpu import gpu_catalog

    for gpu in gpu_catalog():
        assert gpu.allreduce_gbps and gpu.allreduce_gbps_range and gpu.allreduce_latency_us
        low, high = gpu.allreduce_gbps_range
        assert low <= gpu.allreduce_gbps <= high, gpu.name
        # no published serving result has set them yet: each says so, with what it rests on
        assert gpu.interconnect.startswith("uncalibrated: "), gpu.name
        assert f"{low:g}-{high:g} GB/s" in gpu.interconnect, gpu.name
