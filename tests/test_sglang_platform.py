"""SGLang's ROCm build sizes its default fraction by the CUDA rules; an NPU is refused by name."""

from __future__ import annotations

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine
from kvtier.ledger.plan import plan
from kvtier.model.gpu import resolve_gpu


@pytest.mark.parametrize("gpu", ["MI300X", "MI325X", "MI355X", "AMD Instinct MI325X"])
def test_amd_cards_are_served_by_the_rocm_build(gpu: str) -> None:
    assert resolve_gpu(gpu).vendor == "AMD"
    assert resolve_gpu("H100").vendor == "NVIDIA"


def test_mi325x_is_its_nominal_256_gib() -> None:
    card = resolve_gpu("MI325X")
    assert (card.memory_mib, card.hbm_gbps, card.compute_capability) == (262_144, 6000, None)


def test_rocm_takes_the_cuda_fraction_rule_and_says_so() -> None:
    """v0.5.9 heuristics at 262,144 MiB, the >= 160 GiB tier (chunk 16,384, graph batch 512):
    512 + 1.5 x 16,384 + 2 x 512 + 1,024 / 8 = 26,240 MiB, round((262144 - 26240) / 262144, 3)
    = 0.9, what an NVIDIA card of that memory gets."""
    rocm = plan(Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", gpu="MI325X"))
    assert rocm.mem_fraction == 0.9
    (fraction,) = [i for i in rocm.inputs if i.name == "mem_fraction_static"]
    assert "round((262144 - 26240) / 262144, 3)" in fraction.origin
    (note,) = [n for n in rocm.notes if n.startswith("ROCm build (AMD MI325X)")]
    assert "no is_hip() branch" in note
    pinned = plan(Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", gpu="MI325X", mem_fraction=0.9))
    assert not any(n.startswith("ROCm build") for n in pinned.notes)
    cuda = plan(Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", gpu="H200"))
    assert not any(n.startswith("ROCm build") for n in cuda.notes)


def test_an_ascend_npu_fails_closed(capsys: pytest.CaptureFixture[str]) -> None:
    """NPU builds pick other chunk and graph-batch tiers per release; kvtier has no NPU card."""
    args = ["plan", "--engine", "sglang", "--model", "Qwen/Qwen3-8B", "--gpu", "Ascend 910B"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown GPU 'Ascend 910B'" in err[0]
